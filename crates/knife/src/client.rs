//! A small HTTP client of knife's own API, used by `knife run`, `knife threads`
//! and the benchmarks. Events are followed over SSE with knife-llm's decoder.

use std::time::Duration;

use anyhow::{Context, bail};
use futures::{Stream, StreamExt};
use knife_protocol::*;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Client of one knife server (`http://HOST:PORT`).
#[derive(Clone)]
pub struct ApiClient {
    base: String,
    http: reqwest::Client,
    token: Option<String>,
}

impl ApiClient {
    /// A client of `base` (no trailing slash), sending `token` as a bearer token when set.
    pub fn new(base: impl Into<String>, token: Option<String>) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()?;
        Ok(Self {
            base: base.into().trim_end_matches('/').to_owned(),
            http,
            token,
        })
    }

    /// The server's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// True when `GET /healthz` answers 200 within `timeout`.
    pub async fn healthy(&self, timeout: Duration) -> bool {
        let req = self
            .http
            .get(format!("{}/healthz", self.base))
            .timeout(timeout);
        matches!(req.send().await, Ok(r) if r.status().is_success())
    }

    fn auth(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    async fn decode<T: DeserializeOwned>(&self, resp: reqwest::Response) -> anyhow::Result<T> {
        let status = resp.status();
        let text = resp
            .text()
            .await
            .context("the knife server closed the connection")?;
        if !status.is_success() {
            match serde_json::from_str::<ApiErrorBody>(&text) {
                Ok(body) if body.error.code == "unauthorized" => match self.token {
                    Some(_) => bail!(
                        "the knife server at {} rejected the API token: KNIFE_API_TOKEN (or the variable named by [server].api_token_env) is set but does not match the server's token; set it to the token the server was started with",
                        self.base
                    ),
                    None => bail!(
                        "the knife server at {} requires an API token: set KNIFE_API_TOKEN (or the variable named by [server].api_token_env) to the server's token",
                        self.base
                    ),
                },
                Ok(body) => bail!("{} ({})", body.error.message, body.error.code),
                Err(_) => bail!("the knife server answered HTTP {status}: {text}"),
            }
        }
        serde_json::from_str(&text)
            .with_context(|| format!("unexpected answer from the knife server: {text}"))
    }

    /// `GET {path}` decoded as JSON.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let resp = self
            .auth(self.http.get(format!("{}{path}", self.base)))
            .send()
            .await
            .with_context(|| self.unreachable())?;
        self.decode(resp).await
    }

    /// `POST {path}` with a JSON body, decoded as JSON.
    pub async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> anyhow::Result<T> {
        let req = self
            .auth(self.http.post(format!("{}{path}", self.base)))
            .json(body);
        let resp = req.send().await.with_context(|| self.unreachable())?;
        self.decode(resp).await
    }

    /// `PATCH {path}` with a JSON body, decoded as JSON.
    pub async fn patch<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> anyhow::Result<T> {
        let req = self
            .auth(self.http.patch(format!("{}{path}", self.base)))
            .json(body);
        let resp = req.send().await.with_context(|| self.unreachable())?;
        self.decode(resp).await
    }

    /// `DELETE {path}`, decoded as JSON.
    pub async fn delete<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let resp = self
            .auth(self.http.delete(format!("{}{path}", self.base)))
            .send()
            .await
            .with_context(|| self.unreachable())?;
        self.decode(resp).await
    }

    fn unreachable(&self) -> String {
        format!(
            "cannot reach the knife server at {}; start it with `knife serve`",
            self.base
        )
    }

    /// Follows `GET /api/threads/{id}/events?after=N` (SSE): replay, then live, with
    /// the live deltas in between (LIVE-01).
    pub async fn events(
        &self,
        thread: &ThreadId,
        after: u64,
    ) -> anyhow::Result<impl Stream<Item = anyhow::Result<ThreadMessage>> + use<>> {
        let url = format!("{}/api/threads/{thread}/events?after={after}", self.base);
        let resp = self
            .auth(self.http.get(url))
            .send()
            .await
            .with_context(|| self.unreachable())?;
        if !resp.status().is_success() {
            let status = resp.status();
            bail!(
                "cannot follow the events of thread {thread}: HTTP {status}: {}",
                resp.text().await.unwrap_or_default()
            );
        }
        let base = self.base.clone();
        // Slim deltas name only their item; the stream's introductions give the rest.
        let mut items = DeltaItems::default();
        Ok(
            knife_llm::sse::decode_stream(resp.bytes_stream()).map(move |item| match item {
                Ok(ev) if ev.event == "error" => {
                    Err(anyhow::anyhow!("event stream error: {}", ev.data))
                }
                Ok(ev) if ev.event == "delta" => serde_json::from_str::<DeltaMessage>(&ev.data)
                    .context("malformed delta from the server")
                    .and_then(|m| Ok(items.resolve(m)?))
                    .map(ThreadMessage::Delta),
                Ok(ev) if ev.event == "reset" => serde_json::from_str::<ItemReset>(&ev.data)
                    .inspect(|r| items.forget(&r.item_id))
                    .map(ThreadMessage::Reset)
                    .context("malformed reset from the server"),
                Ok(ev) => serde_json::from_str::<StoredEvent>(&ev.data)
                    .map(|e| ThreadMessage::Event(Box::new(e)))
                    .context("malformed event from the server"),
                // A transport failure between this client and the knife server
                // (not a model error: those arrive as events). The decoder's own
                // message speaks of "the model", so it is logged, not shown.
                Err(e) => {
                    tracing::debug!(error = %e, "event stream from the knife server broke");
                    Err(anyhow::anyhow!(server_lost(&base)))
                }
            }),
        )
    }
}

/// One message of a thread's event stream.
#[derive(Debug)]
pub enum ThreadMessage {
    /// A durable event.
    Event(Box<StoredEvent>),
    /// Live text continuing an item (not durable).
    Delta(ItemDelta),
    /// An item's live text is void (a discarded attempt).
    Reset(ItemReset),
}

/// What to tell the user when the connection to the knife server drops while
/// following a run: the turn is recorded server-side and resumes on the next start.
pub fn server_lost(base: &str) -> String {
    format!(
        "lost the connection to the knife server at {base}; the turn is kept and resumes when the server starts again (knife serve)"
    )
}

/// How long a server gets to answer `/healthz` when looking for one.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// The API token to send: `$KNIFE_API_TOKEN`, or the variable named by
/// `[server].api_token_env`; empty values count as unset.
pub fn api_token(config: &crate::config::Config) -> Option<String> {
    let var = config
        .server
        .api_token_env
        .as_deref()
        .unwrap_or("KNIFE_API_TOKEN");
    std::env::var(var).ok().filter(|t| !t.trim().is_empty())
}

/// Finds the knife server a client command should use, in this order:
/// 1. `--server URL` (must answer, else an error — unless `--data-dir` was given too,
///    which then is used without a server);
/// 2. the server of the process holding the data directory's lock;
/// 3. a server answering at the configured listen address, unless `--data-dir`
///    was given (that server may serve another directory).
///
/// `Ok(None)`: no server; the caller may open the data directory itself.
/// Errors: `--server` does not answer; the directory is held by a process without a
/// server (e.g. another in-process `knife run`).
pub async fn find_server(
    config: &crate::config::Config,
    server_flag: Option<&str>,
    data_dir_flag: Option<&std::path::Path>,
) -> anyhow::Result<Option<ApiClient>> {
    let token = api_token(config);
    if let Some(url) = server_flag {
        let client = ApiClient::new(url, token.clone())?;
        if client.healthy(PROBE_TIMEOUT).await {
            return Ok(Some(client));
        }
        if data_dir_flag.is_none() {
            bail!(
                "no knife server answers at {url}; start it with `knife serve`, or pass --data-dir to work without one",
                url = client.base()
            );
        }
        // Both given and the server is down: fall through to the data directory.
    }
    let data_dir = config.data_dir(data_dir_flag)?;
    if let Some(owner) = crate::lock::current_owner(&data_dir).await {
        let Some(url) = owner.url else {
            bail!(
                "another knife process (pid {}) is using {} without a server; wait for it or pass another --data-dir",
                owner.pid,
                data_dir.display()
            );
        };
        let client = ApiClient::new(url, token)?;
        if client.healthy(PROBE_TIMEOUT).await {
            return Ok(Some(client));
        }
        bail!(
            "knife process {} holds {} but its server at {} does not answer; wait for it to start or stop it",
            owner.pid,
            data_dir.display(),
            client.base()
        );
    }
    if data_dir_flag.is_none() {
        let client = ApiClient::new(format!("http://{}", config.listen(None)?), token)?;
        if client.healthy(PROBE_TIMEOUT).await {
            return Ok(Some(client));
        }
    }
    Ok(None)
}
