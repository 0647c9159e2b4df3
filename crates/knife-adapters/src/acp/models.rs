// The model of an ACP run (SPEC.md TURN-10): which model a turn selects with
// `session/set_model` before its prompt, from the models the agent offers.

//! An agent offers models in its `session/new` (or `session/load|resume`) answer:
//! `models: {currentModelId, availableModels: [{modelId, name}]}`. A run's `model` is
//! then selected with `session/set_model` before its prompt, and a later run without
//! one goes back to the model the session opened with. A run that names a model the
//! agent does not offer fails before its prompt with the offered ids; an agent that
//! offers none fails a run naming a model with [`AdapterError::Unsupported`] (knife
//! cannot change it: the user sets it in the agent's own configuration).
//! docs/2026-12-01-acp-model.md says why.

use knife_runtime::AdapterError;

use super::types::SessionModelState;

/// The model to select before the turn's prompt (`None`: the current one is right) and
/// the model the turn runs on (`None`: unknown, the agent offers no models).
///
/// `offered`: the session's models as opened (its `current_model_id` is the session's
/// default); `current`: the model last selected (`None` after a failed selection);
/// `wanted`: the run's model.
///
/// Errors: [`AdapterError::Unsupported`] for a model on an agent that offers none;
/// [`AdapterError::Refused`] (operation `session/set_model`) for a model it does not
/// offer, listing those it does.
pub(super) fn plan(
    offered: Option<&SessionModelState>,
    current: Option<&str>,
    wanted: Option<&str>,
) -> Result<(Option<String>, Option<String>), AdapterError> {
    let Some(offered) = offered else {
        return match wanted {
            None => Ok((None, None)),
            Some(_) => Err(AdapterError::Unsupported {
                operation: "choose the model of a run",
                hint: "this ACP agent offers no models (its session answer has no `models`); \
                       leave `model` out, or set the model in the agent's own configuration",
            }),
        };
    };
    let target = wanted.unwrap_or(offered.current_model_id.as_str());
    if !offered
        .available_models
        .iter()
        .any(|m| m.model_id == target)
    {
        let ids: Vec<&str> = offered
            .available_models
            .iter()
            .map(|m| m.model_id.as_str())
            .collect();
        return Err(AdapterError::Refused {
            operation: super::types::methods::SESSION_SET_MODEL,
            reason: format!(
                "the ACP agent does not offer the model `{target}`; it offers {}: name one of \
                 those, or leave `model` out",
                ids.join(", ")
            ),
        });
    }
    let switch = (current != Some(target)).then(|| target.to_owned());
    Ok((switch, Some(target.to_owned())))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::acp::types::ModelInfo;

    fn offered() -> SessionModelState {
        SessionModelState {
            current_model_id: "a".into(),
            available_models: ["a", "b"]
                .iter()
                .map(|m| ModelInfo {
                    model_id: (*m).into(),
                    name: (*m).into(),
                })
                .collect(),
        }
    }

    #[test]
    fn turn_10_an_acp_run_selects_its_model_and_the_next_goes_back() {
        let o = offered();
        assert_eq!(
            plan(Some(&o), Some("a"), None).unwrap(),
            (None, Some("a".into()))
        );
        assert_eq!(
            plan(Some(&o), Some("a"), Some("b")).unwrap(),
            (Some("b".into()), Some("b".into()))
        );
        assert_eq!(
            plan(Some(&o), Some("b"), None).unwrap(),
            (Some("a".into()), Some("a".into()))
        );
        // After a failed selection the current model is unknown: select again.
        assert_eq!(
            plan(Some(&o), None, Some("b")).unwrap(),
            (Some("b".into()), Some("b".into()))
        );
        let err = plan(Some(&o), Some("a"), Some("c"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`c`") && err.contains("a, b"), "{err}");
        assert_eq!(plan(None, None, None).unwrap(), (None, None));
        let err = plan(None, None, Some("b")).unwrap_err().to_string();
        assert!(err.contains("offers no models"), "{err}");
    }
}
