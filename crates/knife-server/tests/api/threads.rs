//! Projects, provider instances and thread lifecycle over the API (CHG-08): one project
//! per folder, the provider list, rename/archive/delete of threads.

use super::*;

async fn post_project(s: &Server, root: &str) -> (StatusCode, Value) {
    let resp = s
        .http
        .post(s.url("/api/projects"))
        .json(&json!({ "root": root }))
        .send()
        .await
        .unwrap();
    (resp.status(), resp.json().await.unwrap())
}

#[tokio::test]
async fn posting_the_same_folder_twice_answers_201_then_200_with_one_id() {
    let s = serve(None).await;
    let root = s.dir.path().join("same");
    std::fs::create_dir(&root).unwrap();

    let (status, first) = post_project(&s, &root.display().to_string()).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let (status, again) = post_project(&s, &format!("{}/", root.display())).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["id"], first["id"]);

    let list: Vec<Value> = s
        .http
        .get(s.url("/api/projects"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_posts_of_one_folder_make_one_project() {
    let s = Arc::new(serve(None).await);
    let root = s.dir.path().join("race");
    std::fs::create_dir(&root).unwrap();
    let root = root.display().to_string();

    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (s, root) = (s.clone(), root.clone());
            tokio::spawn(async move { post_project(&s, &root).await })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    let ids: BTreeSet<String> = answers
        .iter()
        .map(|(_, body)| body["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 1, "{answers:?}");
    let created = answers
        .iter()
        .filter(|(status, _)| *status == StatusCode::CREATED)
        .count();
    assert_eq!(created, 1, "{answers:?}");
    assert!(
        answers
            .iter()
            .all(|(status, _)| *status == StatusCode::CREATED || *status == StatusCode::OK)
    );
    assert_eq!(s.store.list_projects().await.unwrap().len(), 1);
}

#[tokio::test]
async fn providers_lists_instances_and_marks_the_default() {
    let s = serve(Some(TOKEN)).await;
    let denied = s.http.get(s.url("/api/providers")).send().await.unwrap();
    assert_eq!(denied.status(), StatusCode::UNAUTHORIZED);
    let res = s
        .http
        .get(s.url("/api/providers"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        body,
        json!([
            {"id": "fake", "driver": "openai-chat", "model": "m1", "default": true},
            {"id": "zed", "driver": "codex", "model": null, "default": false},
        ])
    );
}

#[tokio::test]
async fn chg_08_patch_renames_and_archives_and_lists_hide_archived_threads() {
    let s = serve(None).await;
    let t = s.thread().await;
    let path = s.url(&format!("/api/threads/{}", t.id));
    let resp = s
        .http
        .patch(&path)
        .json(&json!({"title": "  Login bug  "}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let renamed: Thread = resp.json().await.unwrap();
    assert_eq!(renamed.title, "Login bug");
    assert!(!renamed.untitled);

    let resp = s
        .http
        .patch(&path)
        .json(&json!({"archived": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let archived: Thread = resp.json().await.unwrap();
    assert!(archived.archived_at.is_some());
    let ids = |threads: Vec<Thread>| threads.into_iter().map(|t| t.id).collect::<Vec<_>>();
    let listed: Vec<Thread> = s
        .http
        .get(s.url("/api/threads"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        ids(listed),
        Vec::<ThreadId>::new(),
        "archived threads are hidden"
    );
    let all: Vec<Thread> = s
        .http
        .get(s.url("/api/threads?archived=true"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ids(all), vec![t.id.clone()]);
    // Still readable, nothing deleted.
    let resp = s.http.get(&path).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);

    let resp = s
        .http
        .patch(&path)
        .json(&json!({"archived": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let listed: Vec<Thread> = s
        .http
        .get(s.url("/api/threads"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ids(listed), vec![t.id.clone()]);
}

#[tokio::test]
async fn chg_08_titles_over_200_characters_or_empty_patches_are_400() {
    let s = serve(None).await;
    let t = s.thread().await;
    let path = s.url(&format!("/api/threads/{}", t.id));
    let resp = s
        .http
        .patch(&path)
        .json(&json!({"title": "é".repeat(201)}))
        .send()
        .await
        .unwrap();
    let message = json_error(resp, StatusCode::BAD_REQUEST, "invalid_request").await;
    assert!(message.contains("200"), "{message}");
    let resp = s
        .http
        .patch(&path)
        .json(&json!({"title": "é".repeat(200)}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let resp = s.http.patch(&path).json(&json!({})).send().await.unwrap();
    json_error(resp, StatusCode::BAD_REQUEST, "invalid_request").await;
    let resp = s
        .http
        .patch(&path)
        .json(&json!({"color": "red"}))
        .send()
        .await
        .unwrap();
    json_error(resp, StatusCode::BAD_REQUEST, "invalid_request").await;
    let resp = s
        .http
        .patch(s.url("/api/threads/thread_nope"))
        .json(&json!({"title": "x"}))
        .send()
        .await
        .unwrap();
    json_error(resp, StatusCode::NOT_FOUND, "not_found").await;
}

#[tokio::test]
async fn chg_08_delete_answers_200_then_the_thread_is_gone() {
    let s = serve(None).await;
    let t = s.thread().await;
    let path = s.url(&format!("/api/threads/{}", t.id));
    let resp = s.http.delete(&path).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body: DeleteThreadResponse = resp.json().await.unwrap();
    assert_eq!(body.thread_id, t.id);
    let resp = s.http.get(&path).send().await.unwrap();
    json_error(resp, StatusCode::NOT_FOUND, "not_found").await;
    let listed: Vec<Thread> = s
        .http
        .get(s.url("/api/threads?archived=true"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(listed.is_empty());
    let resp = s.http.delete(&path).send().await.unwrap();
    json_error(resp, StatusCode::NOT_FOUND, "not_found").await;
}
