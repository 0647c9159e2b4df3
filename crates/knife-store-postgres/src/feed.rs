// The live feed on PostgreSQL: one LISTEN connection per node wakes a pump that reads the
// newly committed rows from `events` in sequence order and publishes them in-process; the
// same connection receives the other nodes' relayed live deltas (crate::relay).

use crate::error::PgResult;
use crate::relay::{DELTA_CHANNEL, Reassembler};
use crate::write::CHANNEL;
use futures::StreamExt;
use knife_protocol::StoredEvent;
use knife_store::RelayedLive;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, broadcast};

/// Rows read per query while catching up.
const PAGE: usize = 512;

/// Pause before reconnecting a lost LISTEN connection.
const RECONNECT: Duration = Duration::from_secs(1);

/// The pump's inputs.
pub(crate) struct Pump {
    pub pool: deadpool_postgres::Pool,
    pub config: tokio_postgres::Config,
    pub live: broadcast::Sender<StoredEvent>,
    pub wake: Arc<Notify>,
    /// The last sequence already in the table when the store opened: published from
    /// there on.
    pub after: u64,
    /// Longest wait between table reads without a wake-up (a missed NOTIFY, a lost
    /// LISTEN connection); never a correctness matter, only latency.
    pub poll_fallback: Duration,
    /// Where the LISTEN connection's reassembled live messages of other nodes go.
    pub relayed: broadcast::Sender<Arc<RelayedLive>>,
    /// This node's sender id on `knife_deltas` (its own frames are skipped).
    pub sender: u64,
}

impl Pump {
    /// Runs until aborted (the store's last handle dropped). Publishes every committed
    /// event exactly once, in sequence order: sequences are assigned in commit order
    /// (crate::write::APPEND_LOCK), so the rows visible after a wake-up are always a
    /// gap-free continuation of what was published.
    pub(crate) async fn run(self) {
        let mut last = self.after;
        let mut listener: Option<Listener> = None;
        loop {
            let mut fresh = false;
            if listener
                .as_ref()
                .is_none_or(|l| l.closed.load(Ordering::Acquire))
            {
                let relay = Reassembler::new(self.sender, self.relayed.clone());
                listener = match Listener::connect(&self.config, self.wake.clone(), relay).await {
                    Ok(l) => {
                        fresh = true;
                        Some(l)
                    }
                    Err(e) => {
                        tracing::warn!(error = %knife_store::StoreError::from(e),
                            "cannot LISTEN for knife events; polling the table meanwhile");
                        None
                    }
                };
            }
            let wait = if listener.is_some() {
                self.poll_fallback
            } else {
                RECONNECT.min(self.poll_fallback)
            };
            // A new LISTEN hears only later commits: read what was committed before it
            // at once instead of at the next poll.
            if !fresh {
                tokio::select! {
                    () = self.wake.notified() => {}
                    () = tokio::time::sleep(wait) => {}
                }
            }
            last = self.drain(last).await;
        }
    }

    /// Publishes every event after `last`; returns the new last sequence.
    async fn drain(&self, mut last: u64) -> u64 {
        loop {
            let page = match self.read_page(last).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(error = %knife_store::StoreError::from(e),
                        "cannot read new knife events; retrying");
                    return last;
                }
            };
            let full = page.len() == PAGE;
            for ev in page {
                last = ev.sequence;
                // An error only means nobody is subscribed right now.
                let _ = self.live.send(ev);
            }
            if !full {
                return last;
            }
        }
    }

    /// The next page of the log after `after`, with a statement prepared once per
    /// connection (the pump reads after every commit of every node).
    async fn read_page(&self, after: u64) -> PgResult<Vec<StoredEvent>> {
        let client = self.pool.get().await?;
        let page = client
            .prepare_cached(
                "SELECT sequence, payload_json FROM events WHERE sequence > $1 \
                 ORDER BY sequence LIMIT $2",
            )
            .await?;
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::try_from(PAGE).unwrap_or(i64::MAX);
        let rows = client.query(&page, &[&after, &limit]).await?;
        rows.iter()
            .map(|row| {
                Ok(StoredEvent {
                    sequence: u64::try_from(row.get::<_, i64>(0)).unwrap_or(0),
                    event: serde_json::from_str(row.get::<_, &str>(1))?,
                })
            })
            .collect()
    }
}

/// The LISTEN connection: its driver task turns notifications into wake-ups.
struct Listener {
    /// Kept alive: dropping it closes the connection (and ends the driver task).
    _client: tokio_postgres::Client,
    /// Set when the connection ended; the pump reconnects.
    closed: Arc<AtomicBool>,
}

impl Listener {
    async fn connect(
        config: &tokio_postgres::Config,
        wake: Arc<Notify>,
        mut relay: Reassembler,
    ) -> PgResult<Listener> {
        let (client, mut connection) = config.connect(tokio_postgres::NoTls).await?;
        let closed = Arc::new(AtomicBool::new(false));
        let flag = closed.clone();
        tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(tokio_postgres::AsyncMessage::Notification(n))
                        if n.channel() == DELTA_CHANNEL =>
                    {
                        relay.frame(n.payload());
                    }
                    Ok(tokio_postgres::AsyncMessage::Notification(_)) => wake.notify_one(),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "the knife LISTEN connection failed");
                        break;
                    }
                }
            }
            flag.store(true, Ordering::Release);
            wake.notify_one();
        });
        client
            .batch_execute(&format!("LISTEN {CHANNEL}; LISTEN {DELTA_CHANNEL}"))
            .await?;
        Ok(Listener {
            _client: client,
            closed,
        })
    }
}
