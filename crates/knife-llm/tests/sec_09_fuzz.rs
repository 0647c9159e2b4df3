//! SEC-09 fuzz targets (proptest, stable Rust): the SSE decoder and the three
//! provider mappers take arbitrary bytes — random, or recorded streams with bytes
//! flipped, cut and inserted — in arbitrary chunks, and never panic. The case count
//! is proptest's (`PROPTEST_CASES`, default 256): the CI smoke; raise it for longer runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::OnceLock;

use common::{all_sse_fixtures, decode_chunks, load, map_chunks_with, split_at_offsets};
use knife_llm::anthropic::AnthropicMapper;
use knife_llm::openai_chat::ChatCompletionsMapper;
use knife_llm::openai_responses::ResponsesMapper;
use proptest::prelude::*;
use proptest::sample::Index;

fn fixtures() -> &'static [Vec<u8>] {
    static CELL: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CELL.get_or_init(|| all_sse_fixtures().iter().map(|rel| load(rel).0).collect())
}

/// One edit of a byte string: flip a byte, cut a range, insert bytes.
#[derive(Clone, Debug)]
enum Edit {
    Flip(Index, u8),
    Cut(Index, Index),
    Insert(Index, Vec<u8>),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Flip(i, b)),
        (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Edit::Cut(a, b)),
        (
            any::<Index>(),
            prop::collection::vec(
                prop_oneof![Just(b'\n'), Just(b':'), Just(b'{'), Just(b'"'), any::<u8>()],
                0..16
            )
        )
            .prop_map(|(i, v)| Edit::Insert(i, v)),
    ]
}

fn apply(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let len = bytes.len().max(1);
        match e {
            Edit::Flip(i, b) if !bytes.is_empty() => {
                let i = i.index(len);
                bytes[i] = *b;
            }
            Edit::Cut(a, b) if !bytes.is_empty() => {
                let (a, b) = (a.index(len), b.index(len));
                bytes.drain(a.min(b)..a.max(b));
            }
            Edit::Insert(i, v) => {
                let i = i.index(len + 1).min(bytes.len());
                bytes.splice(i..i, v.iter().copied());
            }
            _ => {}
        }
    }
    bytes
}

fn chunks_of(bytes: &[u8], cuts: &[Index]) -> Vec<Vec<u8>> {
    let mut offsets: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len().max(1))).collect();
    offsets.sort_unstable();
    offsets.dedup();
    split_at_offsets(bytes, &offsets)
        .into_iter()
        .map(<[u8]>::to_vec)
        .collect()
}

/// Everything downstream of the bytes: decoder alone, then each mapper.
fn run_all(chunks: &[Vec<u8>]) {
    let chunks: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
    let _ = decode_chunks(&chunks);
    let _ = map_chunks_with(&mut ChatCompletionsMapper::new(), &chunks);
    let _ = map_chunks_with(&mut AnthropicMapper::new(), &chunks);
    let _ = map_chunks_with(&mut ResponsesMapper::new(), &chunks);
}

proptest! {
    #[test]
    fn sec_09_sse_decoder_and_mappers_never_panic_on_arbitrary_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..2048),
        cuts in prop::collection::vec(any::<Index>(), 0..8),
    ) {
        run_all(&chunks_of(&bytes, &cuts));
    }

    #[test]
    fn sec_09_sse_decoder_and_mappers_never_panic_on_mutated_recordings(
        pick in any::<Index>(),
        edits in prop::collection::vec(edit(), 1..12),
        cuts in prop::collection::vec(any::<Index>(), 0..8),
    ) {
        let all = fixtures();
        prop_assume!(!all.is_empty());
        let bytes = apply(all[pick.index(all.len())].clone(), &edits);
        run_all(&chunks_of(&bytes, &cuts));
    }
}
