//! wordcount: counts lines, words and bytes of a file or of standard input.

use std::io::Read;

/// Line, word and byte counts of one input.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    lines: usize,
    words: usize,
    bytes: usize,
}

fn count(text: &str) -> Counts {
    Counts {
        lines: text.lines().count(),
        words: text.split_whitespace().count(),
        bytes: text.len(),
    }
}

fn main() -> std::io::Result<()> {
    let mut text = String::new();
    match std::env::args().nth(1) {
        Some(path) => text = std::fs::read_to_string(path)?,
        None => {
            std::io::stdin().read_to_string(&mut text)?;
        }
    }
    let c = count(&text);
    println!("{} {} {}", c.lines, c.words, c.bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_words() {
        assert_eq!(count("a b\nc\n"), Counts { lines: 2, words: 3, bytes: 6 });
    }
}
