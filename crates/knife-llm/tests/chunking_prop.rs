//! Property tests: the decoder and the mapper give the same output however the
//! body is split into network chunks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::OnceLock;

use common::{
    all_sse_fixtures, chat_fixtures, decode_chunks, load, map_chunks, map_chunks_with,
    protocol_fixtures, split_at_offsets,
};
use knife_llm::anthropic::AnthropicMapper;
use knife_llm::openai_responses::ResponsesMapper;
use knife_llm::sse::SseEvent;
use proptest::prelude::*;
use proptest::sample::Index;

/// Fixture bytes, loaded once per test binary.
fn fixture_bytes(
    list: fn() -> Vec<String>,
    cell: &'static OnceLock<Vec<(String, Vec<u8>)>>,
) -> &'static [(String, Vec<u8>)] {
    cell.get_or_init(|| {
        list()
            .into_iter()
            .map(|rel| {
                let (bytes, _) = load(&rel);
                (rel, bytes)
            })
            .collect()
    })
}

fn all_fixtures() -> &'static [(String, Vec<u8>)] {
    static CELL: OnceLock<Vec<(String, Vec<u8>)>> = OnceLock::new();
    fixture_bytes(all_sse_fixtures, &CELL)
}

fn chat_only() -> &'static [(String, Vec<u8>)] {
    static CELL: OnceLock<Vec<(String, Vec<u8>)>> = OnceLock::new();
    fixture_bytes(chat_fixtures, &CELL)
}

fn anthropic_and_responses() -> &'static [(String, Vec<u8>)] {
    static CELL: OnceLock<Vec<(String, Vec<u8>)>> = OnceLock::new();
    fixture_bytes(
        || {
            let mut list = protocol_fixtures("anthropic-messages");
            list.extend(protocol_fixtures("responses"));
            list
        },
        &CELL,
    )
}

/// Maps the chunks with the mapper of the fixture's protocol.
fn map_protocol(
    rel: &str,
    chunks: &[&[u8]],
) -> Vec<Result<knife_llm::LlmEvent, knife_llm::LlmError>> {
    if rel.starts_with("sse/anthropic-messages/") {
        map_chunks_with(&mut AnthropicMapper::new(), chunks)
    } else {
        map_chunks_with(&mut ResponsesMapper::new(), chunks)
    }
}

fn offsets(cuts: &[Index], len: usize) -> Vec<usize> {
    let mut offsets: Vec<usize> = cuts.iter().map(|c| c.index(len.max(1))).collect();
    offsets.sort_unstable();
    offsets.dedup();
    offsets
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any fixture (all protocols), cut at up to 64 random offsets, decodes to
    /// the same events and the same EOF result as the whole body.
    #[test]
    fn prop_any_chunking_decodes_the_same(pick in any::<Index>(), cuts in prop::collection::vec(any::<Index>(), 0..64)) {
        let (rel, bytes) = pick.get(all_fixtures());
        let chunks = split_at_offsets(bytes, &offsets(&cuts, bytes.len()));
        prop_assert_eq!(decode_chunks(&chunks), decode_chunks(&[bytes]), "{}", rel);
    }

    /// Any Chat Completions fixture, cut anywhere, maps to the same LlmEvents.
    #[test]
    fn prop_any_chunking_maps_the_same(pick in any::<Index>(), cuts in prop::collection::vec(any::<Index>(), 0..64)) {
        let (rel, bytes) = pick.get(chat_only());
        let chunks = split_at_offsets(bytes, &offsets(&cuts, bytes.len()));
        prop_assert_eq!(map_chunks(&chunks), map_chunks(&[bytes]), "{}", rel);
    }

    /// Any Anthropic Messages or Responses fixture, cut anywhere, maps to the
    /// same LlmEvents with its protocol's mapper.
    #[test]
    fn prop_any_chunking_maps_the_same_for_anthropic_and_responses(pick in any::<Index>(), cuts in prop::collection::vec(any::<Index>(), 0..64)) {
        let (rel, bytes) = pick.get(anthropic_and_responses());
        let chunks = split_at_offsets(bytes, &offsets(&cuts, bytes.len()));
        prop_assert_eq!(map_protocol(rel, &chunks), map_protocol(rel, &[bytes]), "{}", rel);
    }

    /// Generated streams: random events written with random line endings
    /// (LF / CRLF / CR), optional BOM, comments and optional space after the
    /// colon decode back to exactly those events under any chunking.
    #[test]
    fn prop_generated_streams_round_trip(
        events in prop::collection::vec((prop::option::of("[a-z.]{1,12}"), prop::collection::vec("[^\r\n]{0,20}", 1..4)), 0..8),
        endings in prop::collection::vec(0usize..3, 64),
        bom in any::<bool>(),
        cuts in prop::collection::vec(any::<Index>(), 0..32),
    ) {
        let mut body = Vec::new();
        if bom {
            body.extend_from_slice(&[0xEF, 0xBB, 0xBF]);
        }
        let mut line_no = 0;
        let mut last_was_cr = false;
        let mut line = |body: &mut Vec<u8>, text: &str| {
            let mut ending = endings[line_no % endings.len()];
            // CR then an empty LF-terminated line is one CRLF break, not two:
            // keep the generated stream unambiguous.
            if text.is_empty() && last_was_cr {
                ending = 2;
            }
            body.extend_from_slice(text.as_bytes());
            body.extend_from_slice([&b"\n"[..], b"\r\n", b"\r"][ending]);
            last_was_cr = ending == 2;
            line_no += 1;
        };
        let mut want = Vec::new();
        for (i, (name, data)) in events.iter().enumerate() {
            line(&mut body, ": comment");
            if let Some(name) = name {
                line(&mut body, &format!("event: {name}"));
            }
            let mut joined = Vec::new();
            for d in data {
                let sep = if i % 2 == 0 { ": " } else { ":" };
                line(&mut body, &format!("data{sep}{d}"));
                // With no space after the colon, one leading space of the value
                // is the optional separator and is stripped.
                joined.push(if sep == ":" { d.strip_prefix(' ').unwrap_or(d) } else { d.as_str() });
            }
            line(&mut body, "");
            want.push(SseEvent {
                event: name.clone().unwrap_or_else(|| "message".into()),
                data: joined.join("\n"),
                id: None,
            });
        }
        let chunks = split_at_offsets(&body, &offsets(&cuts, body.len()));
        let (got, end) = decode_chunks(&chunks);
        prop_assert_eq!(end, Ok(()));
        prop_assert_eq!(got, want);
    }
}

/// Every fixture fed one byte at a time decodes and maps like the whole body.
#[test]
fn one_byte_chunks_all_fixtures() {
    for (rel, bytes) in all_fixtures() {
        let one: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(decode_chunks(&one), decode_chunks(&[bytes]), "{rel}");
    }
    for (rel, bytes) in chat_only() {
        let one: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(map_chunks(&one), map_chunks(&[bytes]), "{rel}");
    }
}

/// The utf8 fixture split at every `multibyte_split_offsets` entry keeps its text.
#[test]
fn utf8_multibyte_split_offsets_map_the_same() {
    let (bytes, expected) = load("adversarial/utf8-multibyte.sse");
    let whole = map_chunks(&[&bytes]);
    for offset in expected["sse"]["multibyte_split_offsets"]
        .as_array()
        .unwrap()
    {
        let offset = offset.as_u64().unwrap() as usize;
        assert_eq!(
            map_chunks(&split_at_offsets(&bytes, &[offset])),
            whole,
            "split at {offset}"
        );
    }
}
