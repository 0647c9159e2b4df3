//! Clean environments for processes knife starts (SPEC.md SEC-02): built from an
//! allowlist of knife's own variables, never inherited whole.

use std::ffi::OsString;

/// Variables a command the model runs (`bash`) takes from knife's environment:
/// nothing else (no provider key, token or cloud credential) reaches it. `LC_*`
/// stands for every locale variable.
pub const COMMAND_ENV_ALLOWLIST: &[&str] = &[
    "PATH", "HOME", "LANG", "LC_*", "TERM", "USER", "SHELL", "TMPDIR",
];

/// Variables an external runtime (codex, ACP agents) takes from knife's environment
/// besides [`COMMAND_ENV_ALLOWLIST`]: where it keeps its own config and state, how it
/// reaches the network (proxies, CA certificates) and `LOGNAME`. Its own API key
/// variable and its instance's `env` table come on top (see the callers).
pub const AGENT_ENV_EXTRA: &[&str] = &[
    "LOGNAME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    "CODEX_HOME",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "RUST_LOG",
];

fn allowed(name: &str, allow: &[&str]) -> bool {
    allow.iter().any(|a| match a.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == *a,
    })
}

/// The variables of `vars` (knife's environment, e.g. `std::env::vars_os()`) whose
/// names `allow` lists (a trailing `*` matches a prefix), then `extra` on top (a
/// project's or an instance's own `env` table; it wins).
pub fn filtered_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
    allow: &[&str],
    extra: &[(OsString, OsString)],
) -> Vec<(OsString, OsString)> {
    let mut out: Vec<(OsString, OsString)> = vars
        .into_iter()
        .filter(|(name, _)| name.to_str().is_some_and(|n| allowed(n, allow)))
        .filter(|(name, _)| !extra.iter().any(|(e, _)| e == name))
        .collect();
    out.extend(extra.iter().cloned());
    out
}

/// The environment of a model-run command: [`COMMAND_ENV_ALLOWLIST`] from knife's
/// own environment plus `project_env`. Use it with `Launch::env_clear`.
pub fn command_env(project_env: &[(OsString, OsString)]) -> Vec<(OsString, OsString)> {
    filtered_env(std::env::vars_os(), COMMAND_ENV_ALLOWLIST, project_env)
}

/// The environment of an external runtime: [`COMMAND_ENV_ALLOWLIST`] and
/// [`AGENT_ENV_EXTRA`] from knife's environment, the variables named in `own`
/// (its API key variable), then `instance_env` on top.
pub fn agent_env(
    own: &[String],
    instance_env: &[(OsString, OsString)],
) -> Vec<(OsString, OsString)> {
    let mut allow: Vec<&str> = COMMAND_ENV_ALLOWLIST.to_vec();
    allow.extend_from_slice(AGENT_ENV_EXTRA);
    allow.extend(own.iter().map(String::as_str));
    filtered_env(std::env::vars_os(), &allow, instance_env)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(k: &str, v: &str) -> (OsString, OsString) {
        (k.into(), v.into())
    }

    #[test]
    fn sec_02_only_allowlisted_variables_and_the_project_env_pass() {
        let knife = vec![
            pair("PATH", "/usr/bin"),
            pair("HOME", "/root"),
            pair("LC_ALL", "C.UTF-8"),
            pair("OPENAI_API_KEY", "sk-x"),
            pair("GITHUB_TOKEN", "ghp"),
            pair("AWS_SECRET_ACCESS_KEY", "aws"),
            pair("KNIFE_API_TOKEN", "t"),
        ];
        let env = filtered_env(
            knife,
            COMMAND_ENV_ALLOWLIST,
            &[pair("FOO", "bar"), pair("PATH", "/p")],
        );
        let names: Vec<_> = env
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["HOME", "LC_ALL", "FOO", "PATH"]);
        assert!(env.contains(&pair("PATH", "/p")), "the project's env wins");
    }
}
