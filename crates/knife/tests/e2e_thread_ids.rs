// Thread references on the command line (SPEC UX-04) through the real binary and server:
// a unique prefix of a thread id works wherever a thread is named, `--last` continues the
// project's most recent thread, and the list shows human timestamps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use knife_protocol::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ux_04_a_thread_id_prefix_and_last_continue_the_right_thread() {
    let mock = MockLlm::script(
        "[[response]]\ntext = \"One.\"\n\n[[response]]\ntext = \"Two.\"\n\n\
         [[response]]\ntext = \"Three.\"\n\n[[response]]\ntext = \"Four.\"\n",
        &[],
    )
    .await;
    let server = Server::start(&mock.base_url()).await;
    let url = server.proc.url();
    let project = server.project_dir().display().to_string();
    let cwd = server.path().to_owned();
    let run = |args: Vec<String>| {
        let cwd = cwd.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_cli(&cwd, &args).await
        }
    };
    let s = |v: &[&str]| {
        v.iter()
            .map(std::string::ToString::to_string)
            .collect::<Vec<_>>()
    };

    for prompt in ["first thread", "second thread"] {
        let out = run(s(&["run", "--server", &url, "--project", &project, prompt])).await;
        assert!(out.status.success(), "{}", out.stderr);
    }
    let (_, threads) = server.api.get("/api/threads").await;
    let threads: Vec<Thread> = serde_json::from_value(threads).unwrap();
    let newest = threads
        .iter()
        .max_by_key(|t| t.updated_at)
        .unwrap()
        .id
        .to_string();
    let oldest = threads
        .iter()
        .min_by_key(|t| t.updated_at)
        .unwrap()
        .id
        .to_string();

    // --last continues the most recent thread of the project.
    let out = run(s(&[
        "run",
        "--server",
        &url,
        "--project",
        &project,
        "--last",
        "more",
    ]))
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("thread {newest}")),
        "{}",
        out.stderr
    );
    assert_eq!(out.stdout.trim_end(), "Three.");

    // A unique prefix of the older thread's id, with --thread and with threads show.
    let prefix = (4..oldest.len())
        .map(|n| &oldest[..n])
        .find(|p| {
            threads
                .iter()
                .filter(|t| t.id.as_str().starts_with(p))
                .count()
                == 1
        })
        .unwrap()
        .to_owned();
    let out = run(s(&["run", "--server", &url, "--thread", &prefix, "older"])).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("thread {oldest}")),
        "{}",
        out.stderr
    );
    let show = run(s(&["threads", "show", &prefix, "--server", &url])).await;
    assert!(show.status.success(), "{}", show.stderr);
    assert!(
        show.stdout.contains(&format!("thread   {oldest}")),
        "{}",
        show.stdout
    );
    assert!(show.stdout.contains("you: older"), "{}", show.stdout);

    // A prefix that is no thread's id fails and says how to find one.
    let out = run(s(&["threads", "show", "zz-not-a-thread", "--server", &url])).await;
    assert!(!out.status.success());
    assert!(
        out.stderr
            .contains("no thread id starts with `zz-not-a-thread`"),
        "{}",
        out.stderr
    );

    // The list shows when, as a person reads it (no seconds fraction, "ago").
    let list = run(s(&["threads", "list", "--server", &url])).await;
    assert!(list.status.success(), "{}", list.stderr);
    let row = list
        .stdout
        .lines()
        .find(|l| l.starts_with(&oldest))
        .unwrap();
    assert!(
        row.contains("(just now)") || row.contains("min ago)"),
        "{row}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ux_04_attach_follows_a_run_started_elsewhere_from_where_it_is() {
    // 24 words, 120 ms apart: about 3 s of streaming to attach in the middle of.
    let words: Vec<String> = (1..=24).map(|n| format!("w{n}")).collect();
    let answer = words.join(" ");
    let mock = MockLlm::script(
        &format!("[[response]]\ntext = \"{answer}\"\nstream_deltas_ms = 120\n"),
        &[],
    )
    .await;
    let server = Server::start(&mock.base_url()).await;
    let url = server.proc.url();
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    let run = server.api.post_message(&thread, "count slowly").await;

    // Attach once part of the answer is recorded, by an 8-character prefix.
    poll_until("part of the answer is recorded", CLI_TIMEOUT, || async {
        let p = server.api.projection(&thread).await;
        p.turn_items.iter().any(|i| {
            matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if text.contains("w2 "))
        })
        .then_some(())
    })
    .await;
    let out = run_cli(server.path(), &["attach", &thread[..8], "--server", &url]).await;
    assert!(out.status.success(), "{}", out.stderr);
    // Every word once, in order: what was said before attaching, then the rest live.
    assert_eq!(out.stdout.trim_end(), answer, "{}", out.stderr);
    assert!(out.stderr.contains("you: count slowly"), "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("thread {thread} · run 1 · completed")),
        "{}",
        out.stderr
    );
    let (_, done) = server.api.follow_run(&thread, &run, 0).await;
    assert_eq!(done.status, RunStatus::Completed);

    // Nothing running: it says so and exits 0.
    let again = run_cli(server.path(), &["attach", &thread, "--server", &url]).await;
    assert!(again.status.success(), "{}", again.stderr);
    assert!(
        again
            .stderr
            .contains("has no run in progress (run 1 completed)"),
        "{}",
        again.stderr
    );
}
