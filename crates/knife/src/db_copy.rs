// `knife db copy --to postgres://…` (SPEC.md SCALE-09): moves a stopped SQLite installation
// into PostgreSQL — the events with their sequences, then the projections, then a check.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};
use knife_store::{Store, StreamFilter};

use crate::store_url::StoreLocation;

/// Events read from the source and imported into the target per transaction.
const PAGE: usize = 2_000;

/// Columns that are operational marks rather than folded state (the reaper's last-seen
/// time, raised by touches outside the log): not compared.
const OPERATIONAL_COLUMNS: &[&str] = &["last_seen_at_us"];

/// Copies the SQLite database `db` (its data directory locked by the caller) into the
/// PostgreSQL database `to`: every event in sequence order with its sequence, then the
/// projections rebuilt from them, the reaper's last-seen marks copied, and the two sets
/// of projections compared table by table (printed). With `resume`, a target holding the
/// source's first events (an interrupted copy) is continued; any other non-empty target
/// is refused.
///
/// Errors: a target URL that is not PostgreSQL, an unreachable target, a non-empty
/// target, a failed import, or projections that differ (the copy is then not usable).
pub async fn copy(db: &Path, to: &str, resume: bool) -> anyhow::Result<ExitCode> {
    let StoreLocation::Postgres(url) = StoreLocation::parse(Some(to))? else {
        bail!(
            "knife db copy copies into PostgreSQL: pass --to postgres://user:password@host:port/database"
        );
    };
    let shown = knife_store_postgres::redact(&url);
    let source = knife_store_sqlite::open(db).await?;
    let target = knife_store_postgres::open(&url)
        .await
        .with_context(|| format!("cannot open the target database {shown}"))?;
    let head = target.latest_sequence(None).await?;
    let mut after = 0;
    if head > 0 {
        if !resume {
            bail!(
                "the target database {shown} already holds events (up to sequence {head}); copy into \
                 an empty database, or pass --continue to finish an earlier copy of this installation"
            );
        }
        after = check_prefix(&source, &target, head, &shown).await?;
        println!("continuing the copy after sequence {after}");
    }
    let mut copied = 0u64;
    loop {
        let page = source
            .read_events(&StreamFilter::after(after), PAGE)
            .await?;
        let Some(last) = page.last().map(|e| e.sequence) else {
            break;
        };
        copied += page.len() as u64;
        target.import_events(page).await?;
        after = last;
    }
    let rebuilt = target.rebuild().await?;
    for activity in source.list_session_activity().await? {
        target
            .touch_provider_session(&activity.session.id, activity.last_seen_at)
            .await?;
    }
    println!(
        "copied {copied} events (last sequence {after}) from {} to {shown}; rebuilt its projections from {} events",
        db.display(),
        rebuilt.events
    );
    compare(&source, &target).await
}

/// The target's events must be the source's first ones (same sequences and ids);
/// returns the target's last sequence.
async fn check_prefix(
    source: &Store,
    target: &Store,
    head: u64,
    shown: &str,
) -> anyhow::Result<u64> {
    let mut after = 0;
    while after < head {
        let theirs = target
            .read_events(&StreamFilter::after(after), PAGE)
            .await?;
        let ours = source
            .read_events(&StreamFilter::after(after), PAGE)
            .await?;
        for (i, t) in theirs.iter().enumerate() {
            let same = ours
                .get(i)
                .is_some_and(|o| o.sequence == t.sequence && o.event.id == t.event.id);
            if !same {
                bail!(
                    "the target database {shown} holds events this installation does not have \
                     (sequence {}); it is not an earlier copy of it: copy into an empty database",
                    t.sequence
                );
            }
        }
        match theirs.last() {
            Some(last) => after = last.sequence,
            None => break,
        }
    }
    Ok(after)
}

/// Prints each projection table's row counts and whether source and copy are equal;
/// fails when one differs.
async fn compare(source: &Store, target: &Store) -> anyhow::Result<ExitCode> {
    let ours = normalized(source.dump_projections().await?);
    let theirs = normalized(target.dump_projections().await?);
    let mut differ = Vec::new();
    println!("{:<28} {:>8} {:>8}  result", "projection", "source", "copy");
    for table in ours
        .keys()
        .chain(theirs.keys().filter(|t| !ours.contains_key(*t)))
    {
        let (a, b) = (ours.get(table), theirs.get(table));
        let equal = a == b;
        println!(
            "{table:<28} {:>8} {:>8}  {}",
            a.map_or(0, Vec::len),
            b.map_or(0, Vec::len),
            if equal { "equal" } else { "DIFFERENT" }
        );
        if !equal {
            differ.push(table.clone());
        }
    }
    if !differ.is_empty() {
        bail!(
            "the copy's projections differ from the source's in {}; do not use the copy: drop the \
             target database and run `knife db copy` again (and report it: this is a bug)",
            differ.join(", ")
        );
    }
    println!("the copy's projections equal the source's");
    Ok(ExitCode::SUCCESS)
}

/// The dump without the operational columns.
fn normalized(
    mut dump: BTreeMap<String, Vec<serde_json::Value>>,
) -> BTreeMap<String, Vec<serde_json::Value>> {
    for rows in dump.values_mut() {
        for row in rows.iter_mut() {
            if let Some(obj) = row.as_object_mut() {
                for column in OPERATIONAL_COLUMNS {
                    obj.remove(*column);
                }
            }
        }
    }
    dump
}
