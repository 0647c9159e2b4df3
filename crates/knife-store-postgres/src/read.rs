// Read side on PostgreSQL: events by filter, entities by id or list, the thread
// projection from one snapshot, and the dump of every projection table.

use crate::error::PgResult;
use knife_protocol::{DomainEvent, StoredEvent, ThreadProjection, TurnItem};
use knife_store::StreamFilter;
use knife_store::fold::{PROJECTION_TABLES, StoredChunk, assemble};
use postgres_types::{ToSql, Type};
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, HashMap};
use tokio_postgres::GenericClient;

fn seq_i64(sequence: u64) -> i64 {
    i64::try_from(sequence).unwrap_or(i64::MAX)
}

fn seq_u64(sequence: i64) -> u64 {
    u64::try_from(sequence).unwrap_or(0)
}

/// Events matching `filter` with `filter.after < sequence <= through` (no upper bound
/// when `through` is None), in sequence order, at most `limit`.
pub(crate) async fn read_events(
    client: &impl GenericClient,
    filter: &StreamFilter,
    through: Option<u64>,
    limit: usize,
) -> PgResult<Vec<StoredEvent>> {
    let after = seq_i64(filter.after);
    let through = through.map(seq_i64);
    let thread = filter.thread_id.as_ref().map(|t| t.as_str().to_owned());
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut sql = String::from("SELECT sequence, payload_json FROM events WHERE sequence > $1");
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&after];
    if let Some(through) = &through {
        params.push(through);
        sql.push_str(&format!(" AND sequence <= ${}", params.len()));
    }
    if let Some(thread) = &thread {
        params.push(thread);
        sql.push_str(&format!(" AND thread_id = ${}", params.len()));
    }
    if let Some(ty) = &filter.event_type {
        params.push(ty);
        sql.push_str(&format!(" AND type = ${}", params.len()));
    }
    params.push(&limit);
    sql.push_str(&format!(" ORDER BY sequence LIMIT ${}", params.len()));
    let rows = client.query(&sql, &params).await?;
    rows.iter()
        .map(|row| {
            let event: DomainEvent = serde_json::from_str(row.get::<_, &str>(1))?;
            Ok(StoredEvent {
                sequence: seq_u64(row.get(0)),
                event,
            })
        })
        .collect()
}

/// Highest sequence in the log (or of one thread's events); 0 when there is none.
pub(crate) async fn latest_sequence(
    client: &impl GenericClient,
    thread: Option<&str>,
) -> PgResult<u64> {
    let row = match thread {
        None => {
            client
                .query_one("SELECT COALESCE(MAX(sequence), 0) FROM events", &[])
                .await?
        }
        Some(t) => {
            client
                .query_one(
                    "SELECT COALESCE(MAX(sequence), 0) FROM events WHERE thread_id = $1",
                    &[&t],
                )
                .await?
        }
    };
    Ok(seq_u64(row.get(0)))
}

/// The entity stored in row `id` of `table`, if any.
/// Row `id` of `table` with its version, if it exists.
pub(crate) async fn get_versioned<T: DeserializeOwned>(
    client: &impl GenericClient,
    table: &str,
    id: &str,
) -> PgResult<Option<(T, i64)>> {
    let row = client
        .query_opt(
            &format!("SELECT payload_json, version FROM {table} WHERE id = $1"),
            &[&id],
        )
        .await?;
    Ok(row
        .map(|r| serde_json::from_str(r.get::<_, &str>(0)).map(|t| (t, r.get::<_, i64>(1))))
        .transpose()?)
}

pub(crate) async fn get_entity<T: DeserializeOwned>(
    client: &impl GenericClient,
    table: &str,
    id: &str,
) -> PgResult<Option<T>> {
    let row = client
        .query_opt(
            &format!("SELECT payload_json FROM {table} WHERE id = $1"),
            &[&id],
        )
        .await?;
    Ok(row
        .map(|r| serde_json::from_str(r.get::<_, &str>(0)))
        .transpose()?)
}

/// The chunk rows (LIVE-03) selected by `sql` (columns item_id, field, start_byte,
/// text, updated_at, in sequence order per item), by item.
async fn chunk_rows(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> PgResult<HashMap<String, Vec<StoredChunk>>> {
    let mut out: HashMap<String, Vec<StoredChunk>> = HashMap::new();
    for row in client.query(sql, params).await? {
        out.entry(row.get(0)).or_default().push(StoredChunk {
            field: row.get(1),
            start: seq_u64(row.get(2)),
            text: row.get(3),
            updated_at: row.get(4),
        });
    }
    Ok(out)
}

/// Turn item `id` as a whole: its row with its appended chunks folded in (LIVE-03).
pub(crate) async fn get_turn_item(
    client: &impl GenericClient,
    id: &str,
) -> PgResult<Option<TurnItem>> {
    let Some(mut item) = get_entity::<TurnItem>(client, "turn_items", id).await? else {
        return Ok(None);
    };
    let thread = item.thread_id.as_str().to_owned();
    let mut chunks = chunk_rows(
        client,
        "SELECT item_id, field, start_byte, text, updated_at FROM turn_item_chunks \
         WHERE thread_id = $1 AND item_id = $2 ORDER BY sequence",
        &[&thread, &id],
    )
    .await?;
    if let Some(rows) = chunks.remove(id) {
        assemble(&mut item, rows);
    }
    Ok(Some(item))
}

/// The entities selected by `sql` (whose only column is `payload_json`).
pub(crate) async fn list_entities<T: DeserializeOwned>(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> PgResult<Vec<T>> {
    let rows = client.query(sql, params).await?;
    Ok(rows
        .iter()
        .map(|r| serde_json::from_str(r.get::<_, &str>(0)))
        .collect::<Result<_, _>>()?)
}

/// The whole projection of one thread from one snapshot (`REPEATABLE READ`, read
/// only). `None` when the thread row does not exist.
pub(crate) async fn thread_projection(
    client: &mut tokio_postgres::Client,
    thread_id: &str,
) -> PgResult<Option<ThreadProjection>> {
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    let Some(thread) = get_entity(&tx, "threads", thread_id).await? else {
        return Ok(None);
    };
    let by_thread = |table: &str, order: &str| {
        format!("SELECT payload_json FROM {table} WHERE thread_id = $1 ORDER BY {order}")
    };
    let t: &(dyn ToSql + Sync) = &thread_id;
    let projection = ThreadProjection {
        thread,
        runs: list_entities(&tx, &by_thread("runs", "ordinal, id"), &[t]).await?,
        turn_items: {
            let mut items: Vec<TurnItem> =
                list_entities(&tx, &by_thread("turn_items", "ordinal, id"), &[t]).await?;
            let mut chunks = chunk_rows(
                &tx,
                "SELECT item_id, field, start_byte, text, updated_at FROM turn_item_chunks \
                 WHERE thread_id = $1 ORDER BY item_id, sequence",
                &[t],
            )
            .await?;
            if !chunks.is_empty() {
                for item in &mut items {
                    if let Some(rows) = chunks.remove(item.id.as_str()) {
                        assemble(item, rows);
                    }
                }
            }
            items
        },
        nodes: list_entities(&tx, &by_thread("nodes", "created_sequence"), &[t]).await?,
        provider_sessions: list_entities(
            &tx,
            "SELECT s.payload_json FROM provider_session_bindings b \
             JOIN provider_sessions s ON s.id = b.provider_session_id \
             WHERE b.thread_id = $1 ORDER BY b.bound_sequence",
            &[t],
        )
        .await?,
        provider_threads: list_entities(
            &tx,
            &by_thread("provider_threads", "created_sequence"),
            &[t],
        )
        .await?,
        provider_turns: list_entities(&tx, &by_thread("provider_turns", "created_sequence"), &[t])
            .await?,
        runtime_requests: list_entities(
            &tx,
            &by_thread("runtime_requests", "created_sequence"),
            &[t],
        )
        .await?,
        latest_sequence: latest_sequence(&tx, Some(thread_id)).await?,
        mcp: None,
        lease: None,
    };
    tx.commit().await?;
    Ok(Some(projection))
}

/// Every row of every projection table as JSON objects (column → value,
/// `payload_json` parsed), each table ordered by its primary key, from one snapshot.
pub(crate) async fn dump_projections(
    client: &mut tokio_postgres::Client,
) -> PgResult<BTreeMap<String, Vec<serde_json::Value>>> {
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    let mut out = BTreeMap::new();
    for table in PROJECTION_TABLES {
        let order = knife_store::fold::key_order(table);
        // `COLLATE "C"` on the text keys: byte order, as SQLite sorts TEXT.
        let order = order
            .split(", ")
            .map(|c| match c {
                "sequence" => c.to_owned(),
                _ => format!("{c} COLLATE \"C\""),
            })
            .collect::<Vec<_>>()
            .join(", ");
        let rows = tx
            .query(&format!("SELECT * FROM {table} ORDER BY {order}"), &[])
            .await?;
        let mut dumped = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut obj = serde_json::Map::new();
            for (i, column) in row.columns().iter().enumerate() {
                let value = match *column.type_() {
                    Type::INT8 => row
                        .get::<_, Option<i64>>(i)
                        .map_or(serde_json::Value::Null, Into::into),
                    Type::INT4 => row
                        .get::<_, Option<i32>>(i)
                        .map_or(serde_json::Value::Null, Into::into),
                    _ => match row.get::<_, Option<String>>(i) {
                        None => serde_json::Value::Null,
                        Some(s) if column.name() == "payload_json" => {
                            serde_json::from_str(&s).unwrap_or(serde_json::Value::String(s))
                        }
                        Some(s) => s.into(),
                    },
                };
                obj.insert(column.name().to_owned(), value);
            }
            dumped.push(serde_json::Value::Object(obj));
        }
        out.insert(table.to_owned(), dumped);
    }
    tx.commit().await?;
    Ok(out)
}

/// Full-text search (TURN-08): the words of `q.text` joined for `websearch_to_tsquery`
/// ('simple' configuration; every word must match), ranked by `ts_rank`, snippets
/// from `ts_headline`.
pub(crate) async fn search(
    client: &tokio_postgres::Client,
    q: &knife_store::SearchQuery,
) -> PgResult<Vec<knife_protocol::SearchHit>> {
    let terms = knife_protocol::search_terms(&q.text);
    if terms.is_empty() || q.limit == 0 {
        return Ok(Vec::new());
    }
    let text = terms.join(" ");
    let project = q.project.as_ref().map(|p| p.as_str().to_owned());
    let limit = i64::try_from(q.limit).unwrap_or(i64::MAX);
    let rows = client
        .query(
            "SELECT d.thread_id, t.project_id, t.payload_json::jsonb ->> 'title', d.run_id, \
                    d.id, d.kind, \
                    ts_headline('simple', d.body, q, \
                                'StartSel=[, StopSel=], MaxWords=24, MinWords=8, ShortWord=1'), \
                    ts_rank(to_tsvector('simple', d.body), q)::float8 AS score \
             FROM search_docs d \
             JOIN threads t ON t.id = d.thread_id, \
                  websearch_to_tsquery('simple', $1) q \
             WHERE to_tsvector('simple', d.body) @@ q \
               AND ($2::text IS NULL OR t.project_id = $2) \
             ORDER BY score DESC, d.id LIMIT $3",
            &[&text, &project, &limit],
        )
        .await?;
    let mut hits = Vec::with_capacity(rows.len());
    for row in rows {
        let kind: String = row.get(5);
        let Some(kind) = knife_protocol::SearchKind::parse(&kind) else {
            continue;
        };
        let id: String = row.get(4);
        hits.push(knife_protocol::SearchHit {
            thread_id: row.get::<_, String>(0).into(),
            project_id: row.get::<_, String>(1).into(),
            thread_title: row.get::<_, Option<String>>(2).unwrap_or_default(),
            run_id: row.get::<_, Option<String>>(3).map(Into::into),
            item_id: (kind != knife_protocol::SearchKind::Title).then(|| id.into()),
            kind,
            snippet: row.get(6),
            score: row.get(7),
        });
    }
    Ok(hits)
}

/// Usage sums (TURN-06/07): [`knife_store::usage::sum_sql`] over `model_calls`.
pub(crate) async fn usage_sums(
    client: &tokio_postgres::Client,
    filter: &knife_store::UsageFilter,
) -> PgResult<Vec<knife_store::UsageSum>> {
    use knife_store::usage::{SqlParam, sort_sums, sum_of_row, sum_sql};
    let (sql, params) = sum_sql(filter, |n| format!("${n}"));
    let params: Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>> = params
        .into_iter()
        .map(|p| -> Box<dyn tokio_postgres::types::ToSql + Sync + Send> {
            match p {
                SqlParam::Text(s) => Box::new(s),
                SqlParam::Integer(i) => Box::new(i),
            }
        })
        .collect();
    let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params
        .iter()
        .map(|p| &**p as &(dyn tokio_postgres::types::ToSql + Sync))
        .collect();
    let rows = client.query(&sql, &refs).await?;
    let mut sums = Vec::with_capacity(rows.len());
    for row in rows {
        let mut counts = [0i64; 8];
        for (i, c) in counts.iter_mut().enumerate() {
            *c = row.get(3 + i);
        }
        sums.push(sum_of_row(row.get(0), row.get(1), row.get(2), counts));
    }
    sort_sums(&mut sums);
    Ok(sums)
}
