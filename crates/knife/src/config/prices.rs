//! `[prices."<model>"]` of `knife.toml`: USD per million tokens per model,
//! over knife's default table (SPEC.md TURN-06; `knife_protocol::pricing`).

use std::collections::BTreeMap;

use knife_protocol::{ModelPrice, PriceTable};
use serde::{Deserialize, Deserializer};

/// One model's prices in USD per million tokens, e.g.
/// `[prices."gpt-4o"] input = 2.5, cached_input = 1.25, output = 10`.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PriceConfig {
    /// Uncached input tokens, USD per million.
    #[serde(deserialize_with = "usd")]
    pub input: u64,
    /// Output tokens (reasoning included), USD per million.
    #[serde(deserialize_with = "usd")]
    pub output: u64,
    /// Cached input tokens, USD per million (default: `input`).
    #[serde(default, deserialize_with = "usd_opt")]
    pub cached_input: Option<u64>,
}

impl PriceConfig {
    /// As a [`ModelPrice`] (µ$ per million tokens).
    pub fn price(&self) -> ModelPrice {
        ModelPrice::new(
            self.input,
            self.cached_input.unwrap_or(self.input),
            self.output,
        )
    }
}

/// [`PriceTable::defaults`] with the `[prices]` entries of the config replacing
/// or adding models.
pub fn price_table(prices: &BTreeMap<String, PriceConfig>) -> PriceTable {
    PriceTable::defaults().with(prices.iter().map(|(m, p)| (m.clone(), p.price())))
}

/// A price: a non-negative finite number of USD per million tokens, kept as µ$
/// per million (rounded). Anything else is refused; the TOML error names the line.
fn usd<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    struct Visitor;
    impl serde::de::Visitor<'_> for Visitor {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a price in USD per million tokens, a number such as 2.5")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u64, E> {
            v.checked_mul(1_000_000).ok_or_else(|| {
                E::custom(format!("the price {v} USD per million tokens is too large"))
            })
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<u64, E> {
            match u64::try_from(v) {
                Ok(v) => self.visit_u64(v),
                Err(_) => Err(E::custom(format!(
                    "the price {v} is negative; a price is USD per million tokens, 0 or more"
                ))),
            }
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<u64, E> {
            if !v.is_finite() || v < 0.0 {
                return Err(E::custom(format!(
                    "the price {v} is not a price; write USD per million tokens, 0 or more \
                     (e.g. 2.5)"
                )));
            }
            let micro = (v * 1_000_000.0).round();
            if micro >= u64::MAX as f64 {
                return Err(E::custom(format!(
                    "the price {v} USD per million tokens is too large"
                )));
            }
            Ok(micro as u64)
        }
    }
    deserializer.deserialize_any(Visitor)
}

fn usd_opt<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    usd(deserializer).map(Some)
}
