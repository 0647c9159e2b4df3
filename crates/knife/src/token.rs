//! API tokens (SPEC.md SEC-05): `knife token new` prints a fresh one, and
//! [`check_strength`] refuses tokens too weak for a non-loopback listen.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use clap::Subcommand;

/// Random bytes in a token `knife token new` prints (256 bits).
pub const TOKEN_BYTES: usize = 32;
/// Bits of randomness a token must carry for a non-loopback listen (32 bytes).
pub const MIN_TOKEN_BITS: f64 = 256.0;

/// `knife token …`.
#[derive(Subcommand)]
pub enum TokenCommand {
    /// Print a new API token: 32 random bytes, base64url (43 characters). Put it in
    /// $KNIFE_API_TOKEN (or the variable `[server] api_token_env` names).
    New,
}

/// Runs `knife token new`.
pub fn token(cmd: TokenCommand) -> anyhow::Result<std::process::ExitCode> {
    match cmd {
        TokenCommand::New => {
            println!("{}", new_token()?);
            Ok(std::process::ExitCode::SUCCESS)
        }
    }
}

/// A new token: [`TOKEN_BYTES`] bytes from the OS's random source, base64url
/// without padding.
///
/// Errors: the OS random source failed.
pub fn new_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("cannot read random bytes from the OS: {e}"))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// Refuses a token that cannot hold [`MIN_TOKEN_BITS`] bits of randomness: fewer
/// characters than 32 bytes need in the token's alphabet (64 hex digits, 43
/// base64 characters, 40 of the 94 printable ASCII ones), or a value with so
/// little variety that it is not random (repeats, short patterns). A heuristic: it
/// cannot prove randomness, only catch tokens that are certainly weak.
///
/// Errors: a message saying why and to use `knife token new`.
pub fn check_strength(token: &str, var: &str) -> Result<(), String> {
    let advice = format!(
        "a non-loopback listen needs an API token of at least {TOKEN_BYTES} random bytes; \
         create one with `knife token new` and put it in ${var}"
    );
    let len = token.chars().count();
    let alphabet: f64 = if token.chars().all(|c| c.is_ascii_hexdigit()) {
        16.0
    } else if token
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_+/=".contains(c))
    {
        64.0
    } else {
        94.0
    };
    let bits = len as f64 * alphabet.log2();
    if bits < MIN_TOKEN_BITS {
        return Err(format!(
            "the API token in ${var} is too short ({len} characters, about {bits:.0} bits); {advice}"
        ));
    }
    // Empirical entropy per character: a random hex token of 64 digits scores
    // about 3.7 bits, base64 about 4.9; `aaaa…` scores 0, `abab…` 1.
    let mut counts = std::collections::HashMap::<char, usize>::new();
    for c in token.chars() {
        *counts.entry(c).or_default() += 1;
    }
    let entropy: f64 = counts
        .values()
        .map(|&n| {
            let p = n as f64 / len as f64;
            -p * p.log2()
        })
        .sum();
    if entropy < 3.0 {
        return Err(format!(
            "the API token in ${var} does not look random ({} distinct characters in {len}); {advice}",
            counts.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn sec_05_new_tokens_pass_and_weak_ones_are_refused() {
        for _ in 0..50 {
            let t = new_token().unwrap();
            assert_eq!(t.len(), 43);
            check_strength(&t, "KNIFE_API_TOKEN").unwrap();
        }
        // 64 random-looking hex digits (openssl rand -hex 32) pass.
        check_strength(
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "T",
        )
        .unwrap();
        for weak in [
            "x",
            "s3cret-token",
            "0123456789abcdef0123456789abcdef",
            &"a".repeat(100),
            &"ab".repeat(40),
        ] {
            let e = check_strength(weak, "T").unwrap_err();
            assert!(e.contains("knife token new"), "{weak}: {e}");
        }
    }
}
