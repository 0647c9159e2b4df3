//! Tests of [`super`] (`knife.toml` parsing, env overrides, defaults).
#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;

#[test]
fn access_settings_are_read_with_project_overrides() {
    let c: Config = toml::from_str(
        "agent_browser_access = false\n\
         [[projects]]\nroot = \"/w\"\nagent_browser_access = true\nagent_device_access = true",
    )
    .unwrap();
    let s = c.access_settings();
    assert!(!s.agent_browser_access);
    assert!(!s.agent_device_access);
    assert_eq!(s.projects["/w"].agent_browser_access, Some(true));
    assert_eq!(s.projects["/w"].agent_device_access, Some(true));
    let d = Config::default().access_settings();
    assert!(d.agent_browser_access && !d.agent_device_access);
}

#[test]
fn parses_instances_and_applies_env_overrides() {
    let mut c: Config = toml::from_str(
        r#"
        default_provider = "local"
        [providers.local]
        driver = "openai-chat"
        base_url = "http://127.0.0.1:11434/v1"
        model = "llama3.2"
        "#,
    )
    .unwrap();
    c.apply_env(|k| (k == "KNIFE_PROVIDER_LOCAL_MODEL").then(|| "qwen3".to_owned()));
    assert_eq!(c.providers["local"].model, "qwen3");
    assert_eq!(c.default_instance().unwrap(), "local");
    assert_eq!(
        c.providers.len(),
        1,
        "no implicit openai instance when one is configured"
    );
}

#[test]
fn context_limits_and_retry_budget_are_optional_per_instance() {
    let c: Config = toml::from_str(
        "[providers.a]\ndriver='openai-chat'\nbase_url='x'\nmodel='m'\n\
         context_limit=8192\noutput_limit=1024\nmax_retry_attempts=3\n\
         [providers.b]\ndriver='openai-chat'\nbase_url='y'\nmodel='m'",
    )
    .unwrap();
    let a = &c.providers["a"];
    assert_eq!(
        (a.context_limit, a.output_limit, a.max_retry_attempts),
        (Some(8192), Some(1024), Some(3))
    );
    let b = &c.providers["b"];
    assert_eq!(
        (b.context_limit, b.output_limit, b.max_retry_attempts),
        (None, None, None)
    );
}

#[test]
fn no_file_gives_an_openai_instance_from_env() {
    let mut c = Config::default();
    c.apply_env(|k| (k == "OPENAI_BASE_URL").then(|| "http://x/v1".to_owned()));
    assert_eq!(c.providers["openai"].base_url, "http://x/v1");
    assert_eq!(c.default_instance().unwrap(), "openai");
}

#[test]
fn sessions_settings_default_and_override() {
    use std::time::Duration;
    let defaults = SessionsConfig::default();
    let m = defaults.manager_options();
    assert_eq!(m.idle_timeout, Duration::from_secs(1800));
    assert_eq!(m.max_idle_pin, Duration::from_secs(14_400));
    assert_eq!(m.turn_stall_timeout, Duration::from_secs(900));
    let r = defaults.reaper_options();
    assert_eq!(r.sweep_interval, Duration::from_secs(60));
    assert_eq!(r.inactivity_threshold, Duration::from_secs(1800));

    let c: Config = toml::from_str(
        "[sessions]\nidle_timeout_secs = 5\nmax_idle_pin_secs = 6\nturn_stall_timeout_secs = 0\n\
         sweep_interval_secs = 7\ninactivity_threshold_secs = 8\n",
    )
    .unwrap();
    let m = c.sessions.manager_options();
    assert_eq!(m.idle_timeout, Duration::from_secs(5));
    assert_eq!(m.max_idle_pin, Duration::from_secs(6));
    assert!(m.turn_stall_timeout.is_zero(), "0 turns the watchdog off");
    let r = c.sessions.reaper_options();
    assert_eq!(r.sweep_interval, Duration::from_secs(7));
    assert_eq!(r.inactivity_threshold, Duration::from_secs(8));
    let err = toml::from_str::<Config>("[sessions]\nidle_timeout = 5\n").unwrap_err();
    assert!(err.to_string().contains("idle_timeout"), "{err}");
}

/// Huge durations are clamped to 30 days instead of overflowing `Instant + d`.
#[test]
fn mgr_20_huge_session_durations_are_clamped_to_30_days() {
    let c: Config = toml::from_str(&format!(
        "[sessions]\nidle_timeout_secs = {max}\nmax_idle_pin_secs = {max}\n\
         turn_stall_timeout_secs = {max}\nsweep_interval_secs = {max}\n\
         inactivity_threshold_secs = {max}\n\n\
         [providers.a]\ndriver='openai-chat'\nbase_url='x'\nmodel='m'\n\
         connect_timeout_secs = {max}\nidle_timeout_secs = {max}\n",
        max = u64::MAX
    ))
    .unwrap();
    let limit = std::time::Duration::from_secs(MAX_DURATION_SECS);
    let m = c.sessions.manager_options();
    let r = c.sessions.reaper_options();
    for d in [
        m.idle_timeout,
        m.max_idle_pin,
        m.turn_stall_timeout,
        r.sweep_interval,
        r.inactivity_threshold,
    ] {
        assert_eq!(d, limit);
        assert!(tokio::time::Instant::now().checked_add(d).is_some());
    }
    let t = crate::providers::timeouts(&c.providers["a"]);
    assert_eq!((t.connect, t.idle), (limit, limit));
}

#[test]
fn unknown_keys_are_rejected_with_the_key_name() {
    let err = toml::from_str::<Config>(
        "[providers.a]\ndriver='openai-chat'\nbase_url='x'\nmodel='m'\nbogus=1",
    )
    .unwrap_err();
    assert!(err.to_string().contains("bogus"), "{err}");
}

#[test]
fn anthropic_and_responses_drivers_parse_with_default_base_urls() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("knife.toml");
    std::fs::write(
        &path,
        r#"
        [providers.claude]
        driver = "anthropic"
        model = "claude-sonnet-4-5"
        api_key_env = "ANTHROPIC_API_KEY"
        output_limit = 4096

        [providers.gpt]
        driver = "openai-responses"
        model = "gpt-5"
        reasoning_summary = "auto"

        [providers.proxy]
        driver = "anthropic"
        base_url = "http://127.0.0.1:9/v1"
        model = "m"
        "#,
    )
    .unwrap();
    let c = Config::parse_file(&path).unwrap();
    assert_eq!(
        c.providers["claude"].base_url,
        "https://api.anthropic.com/v1"
    );
    assert_eq!(c.providers["claude"].output_limit, Some(4096));
    assert_eq!(c.providers["gpt"].base_url, "https://api.openai.com/v1");
    assert_eq!(
        c.providers["gpt"].reasoning_summary.as_deref(),
        Some("auto")
    );
    assert_eq!(c.providers["proxy"].base_url, "http://127.0.0.1:9/v1");
}

#[test]
fn several_instances_without_default_provider_say_how_to_pick_one() {
    let mut c: Config = toml::from_str(
        "[providers.cat]\ndriver = 'acp'\ncommand = 'cat'\n\
         [providers.cx]\ndriver = 'codex'\n",
    )
    .unwrap();
    let err = c.default_instance().unwrap_err().to_string();
    assert!(
        err.contains("several provider instances (cat, cx)"),
        "{err}"
    );
    assert!(err.contains("default_provider = \"cat\""), "{err}");
    // `knife run --provider cx` picks the default it needs in-process ...
    c.default_to(Some("cx"));
    assert_eq!(c.default_instance().unwrap(), "cx");
    // ... but never overrides the config's own choice or names an unknown one.
    c.default_to(Some("cat"));
    assert_eq!(c.default_instance().unwrap(), "cx");
    let mut d: Config = toml::from_str(
        "[providers.a]\ndriver = 'acp'\ncommand = 'a'\n[providers.b]\ndriver = 'codex'\n",
    )
    .unwrap();
    d.default_to(Some("nope"));
    assert!(d.default_instance().is_err());
}

#[test]
fn an_unknown_driver_names_the_supported_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("knife.toml");
    std::fs::write(&path, "[providers.x]\ndriver = 'gemini'\nmodel = 'm'\n").unwrap();
    let err = Config::parse_file(&path).unwrap_err().to_string();
    assert!(
        err.contains("openai-chat, anthropic, openai-responses, acp, codex"),
        "{err}"
    );
}

#[test]
fn a_codex_instance_needs_no_base_url_or_model_but_agent_drivers_need_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("knife.toml");
    std::fs::write(
        &path,
        "[providers.cx]\ndriver = 'codex'\ncommand = 'codex'\nargs = ['app-server']\n\
         [providers.cx.env]\nCODEX_HOME = '/srv/codex'\n",
    )
    .unwrap();
    let c = Config::parse_file(&path).unwrap();
    let cx = &c.providers["cx"];
    assert!(cx.is_external());
    assert_eq!(cx.base_url, "");
    assert_eq!(cx.model, "");
    assert_eq!(cx.env["CODEX_HOME"], "/srv/codex");
    std::fs::write(&path, "[providers.x]\ndriver = 'openai-chat'\n").unwrap();
    let err = Config::parse_file(&path).unwrap_err().to_string();
    assert!(err.contains("has no `model`"), "{err}");
}

#[test]
fn permission_rules_are_read_in_order_and_invalid_globs_refused() {
    use knife_agent::permissions::PermissionAction;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("knife.toml");
    std::fs::write(
        &path,
        r#"
        [[permissions]]
        tool = "bash"
        action = "deny"

        [[permissions]]
        tool = "bash"
        pattern = "git *"
        action = "allow"
        "#,
    )
    .unwrap();
    let c = Config::parse_file(&path).unwrap();
    let rules = PermissionRules::new(c.permissions).unwrap();
    assert_eq!(
        rules.evaluate("bash", "git status", true).action,
        PermissionAction::Allow
    );
    assert_eq!(
        rules.evaluate("bash", "curl x", true).action,
        PermissionAction::Deny
    );

    std::fs::write(
        &path,
        "[[permissions]]\ntool = 'bash'\npattern = '[x'\naction = 'deny'\n",
    )
    .unwrap();
    let err = format!("{:#}", Config::parse_file(&path).unwrap_err());
    assert!(
        err.contains("invalid [[permissions]]") && err.contains("[x"),
        "{err}"
    );
    std::fs::write(&path, "[[permissions]]\ntool = 'bash'\naction = 'maybe'\n").unwrap();
    assert!(Config::parse_file(&path).is_err());
}

#[test]
fn approvals_project_permission_overrides_come_after_the_global_rules() {
    use knife_agent::permissions::PermissionAction;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("app")).unwrap();
    let path = dir.path().join("knife.toml");
    std::fs::write(
        &path,
        r#"
        [[permissions]]
        tool = "bash"
        action = "deny"

        [[projects]]
        root = "app"

        [[projects.permissions]]
        tool = "bash"
        pattern = "cargo *"
        action = "allow"

        [[projects]]
        root = "/no/such/folder"
        "#,
    )
    .unwrap();
    let c = Config::parse_file(&path).unwrap();
    assert_eq!(c.projects.len(), 2);
    let per_project = c.project_permissions().unwrap();
    assert_eq!(per_project.len(), 1, "projects without rules are skipped");
    let (root, rules) = &per_project[0];
    assert_eq!(
        root,
        &std::fs::canonicalize(dir.path().join("app")).unwrap()
    );
    assert_eq!(
        rules.evaluate("bash", "cargo test", true).action,
        PermissionAction::Allow
    );
    assert_eq!(
        rules.evaluate("bash", "curl x", true).action,
        PermissionAction::Deny
    );

    std::fs::write(
        &path,
        "[[projects]]\nroot = '.'\n[[projects.permissions]]\ntool = '[x'\naction = 'deny'\n",
    )
    .unwrap();
    let err = format!("{:#}", Config::parse_file(&path).unwrap_err());
    assert!(err.contains("[[projects.permissions]]"), "{err}");
}

/// Writes `text` as a knife.toml in a temp folder and parses it like `--config`.
fn parse_toml(text: &str) -> anyhow::Result<Config> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("knife.toml");
    std::fs::write(&path, text).unwrap();
    Config::parse_file(&path)
}

const MOCK: &str =
    "[providers.mock]\ndriver = 'openai-chat'\nbase_url = 'http://127.0.0.1:1/v1'\nmodel = 'm'\n";

#[test]
fn turn_03_compaction_is_auto_or_off_per_instance() {
    use providers::Compaction;
    for (value, expected) in [
        ("\"off\"", Compaction::Off),
        ("\"auto\"", Compaction::Auto),
        ("false", Compaction::Off),
        ("true", Compaction::Auto),
    ] {
        let c = parse_toml(&format!(
            "{MOCK}compaction = {value}\nmax_compactions = 3\n"
        ))
        .unwrap();
        assert_eq!(c.providers["mock"].compaction, Some(expected), "{value}");
        assert_eq!(c.providers["mock"].max_compactions, Some(3));
    }
    assert_eq!(parse_toml(MOCK).unwrap().providers["mock"].compaction, None);
    let error = format!(
        "{:#}",
        parse_toml(&format!("{MOCK}compaction = \"never\"\n")).unwrap_err()
    );
    assert!(
        error.contains("\"auto\"") && error.contains("\"off\""),
        "{error}"
    );
    // External runtimes manage their own context.
    let error = format!(
        "{:#}",
        parse_toml("[providers.c]\ndriver = 'codex'\ncompaction = 'off'\n").unwrap_err()
    );
    assert!(error.contains("built-in agent"), "{error}");
}

#[test]
fn turn_05_an_output_reserve_that_leaves_no_context_is_refused_with_the_numbers() {
    for output in [8000, 9000] {
        let error = format!(
            "{:#}",
            parse_toml(&format!(
                "{MOCK}context_limit = 8000\noutput_limit = {output}\n"
            ))
            .unwrap_err()
        );
        assert!(
            error.contains(&format!("output_limit = {output}"))
                && error.contains("context_limit = 8000")
                && error.contains("output_limit = 2000"),
            "{error}"
        );
    }
    // The default window is 128 000 tokens.
    assert!(parse_toml(&format!("{MOCK}output_limit = 128000\n")).is_err());
    // A reserve below the window is the user's choice.
    let c = parse_toml(&format!(
        "{MOCK}context_limit = 8000\noutput_limit = 7000\n"
    ))
    .unwrap();
    assert_eq!(c.providers["mock"].output_limit, Some(7000));
    // context_limit = 0 still means no usage check, whatever the reserve.
    let c = parse_toml(&format!("{MOCK}context_limit = 0\noutput_limit = 64000\n")).unwrap();
    assert_eq!(c.providers["mock"].output_limit, Some(64000));
    assert!(parse_toml(&format!("{MOCK}context_limit = 0\n")).is_ok());
}

#[test]
fn turn_05_a_small_window_gets_a_quarter_reserve_with_a_warning_naming_the_numbers() {
    let mut p = parse_toml(MOCK).unwrap().providers["mock"].clone();
    // The default window keeps the default reserve.
    assert_eq!(p.check_limits("mock", Path::new("k.toml")).unwrap(), None);
    assert_eq!(p.output_limit, None);

    p.context_limit = Some(8192);
    let warning = p
        .check_limits("mock", Path::new("k.toml"))
        .unwrap()
        .unwrap();
    assert_eq!(p.output_limit, Some(2048));
    assert!(
        warning.contains("context_limit = 8192")
            && warning.contains("32000")
            && warning.contains("output_limit = 2048")
            && warning.contains("[providers.mock]"),
        "{warning}"
    );
    // Loading applies the correction.
    let c = parse_toml(&format!("{MOCK}context_limit = 8192\n")).unwrap();
    assert_eq!(c.providers["mock"].output_limit, Some(2048));
    let c = parse_toml(&format!("{MOCK}context_limit = 64000\n")).unwrap();
    assert_eq!(c.providers["mock"].output_limit, None);
}

#[test]
fn turn_06_prices_are_usd_per_million_tokens_over_the_default_table() {
    let c = parse_toml(&format!(
        "{MOCK}[prices.\"m\"]\ninput = 1.5\noutput = 6\n\
         [prices.\"gpt-4o\"]\ninput = 5\ncached_input = 0.5\noutput = 20\n"
    ))
    .unwrap();
    let table = prices::price_table(&c.prices);
    assert_eq!(
        table.price("m"),
        Some(&knife_protocol::ModelPrice::new(
            1_500_000, 1_500_000, 6_000_000
        ))
    );
    assert_eq!(
        table.price("gpt-4o-2024-08-06"),
        Some(&knife_protocol::ModelPrice::new(
            5_000_000, 500_000, 20_000_000
        ))
    );
    // Untouched defaults stay.
    assert!(table.price("claude-sonnet-4-20250514").is_some());
}

#[test]
fn turn_06_a_negative_or_non_numeric_price_is_refused_with_its_line() {
    for (bad, why) in [
        ("-1", "negative"),
        ("-0.5", "not a price"),
        ("\"cheap\"", "USD per million tokens"),
    ] {
        let error = format!(
            "{:#}",
            parse_toml(&format!(
                "{MOCK}[prices.\"m\"]\ninput = 1\noutput = {bad}\n"
            ))
            .unwrap_err()
        );
        // MOCK has 4 lines: the table is line 5, `output` line 7.
        assert!(error.contains("line 7"), "{bad}: {error}");
        assert!(error.contains(why), "{bad}: {error}");
    }
}
