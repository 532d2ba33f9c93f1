//! The workload: a seeded generator of events, deliveries and their keys.

use crate::*;

// ---------------------------------------------------------------------------
// Deterministic data
// ---------------------------------------------------------------------------

/// SplitMix64: small, fast, and the same stream on every machine.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub(crate) fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

pub(crate) const WORDS: [&str; 16] = [
    "customer",
    "invoice",
    "payment",
    "succeeded",
    "failed",
    "amount",
    "currency",
    "subscription",
    "created",
    "updated",
    "status",
    "metadata",
    "attempt",
    "response",
    "latency_ms",
    "endpoint",
];
pub(crate) const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// JSON-looking text of exactly `len` bytes: repeated field names and random
/// tokens, so it compresses about as well as real webhook bodies (not zero,
/// not 10x). One draw gives up to ten token characters, so generating the
/// data stays far faster than storing it.
pub(crate) fn json_text(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 48);
    out.push(b'{');
    while out.len() < len {
        let mut bits = rng.next();
        out.push(b'"');
        out.extend_from_slice(WORDS[(bits & 15) as usize].as_bytes());
        out.extend_from_slice(b"\":\"");
        bits >>= 4;
        let token_len = 6 + (bits & 15) as usize;
        bits >>= 4;
        for i in 0..token_len {
            if i == 9 {
                bits = rng.next();
            }
            out.push(ALNUM[(bits & 63) as usize % ALNUM.len()]);
            bits >>= 6;
        }
        out.extend_from_slice(b"\",");
    }
    out.truncate(len);
    out
}

pub(crate) const ENDPOINTS: u64 = 1000;
pub(crate) const EVENT_BYTES: (u64, u64) = (300, 3000);
pub(crate) const DELIVERY_BYTES: (u64, u64) = (300, 1500);
/// Mean raw bytes (keys + values) per event with its delivery and index rows.
pub(crate) const MEAN_BYTES_PER_EVENT: u64 =
    (EVENT_BYTES.0 + EVENT_BYTES.1) / 2 + (DELIVERY_BYTES.0 + DELIVERY_BYTES.1) / 2 + 8 + 8 + 16 + 16;

/// Every record is a pure function of (seed, id), so any phase can rebuild
/// the keys of any record (retention) or stream all rows (bulk load).
/// Each event has one delivery with the same id (the brief's 20k + 20k).
#[derive(Clone, Copy)]
pub(crate) struct Gen {
    pub(crate) seed: u64,
}

impl Gen {
    /// Independent streams per record and purpose.
    pub(crate) fn rng(&self, id: u64, stream: u64) -> Rng {
        Rng(self.seed ^ id.wrapping_mul(0xd6e8_feb8_6659_fd93) ^ stream << 56)
    }

    /// (endpoint id, received ms), drawn without generating payloads.
    pub(crate) fn index_fields(&self, id: u64) -> (u64, u64) {
        let mut r = self.rng(id, 0);
        let endpoint = r.below(ENDPOINTS);
        // Mostly ascending: ~2 ms apart, up to 1 s of arrival jitter.
        let received = 1_700_000_000_000 + id * 2 + r.below(1000);
        (endpoint, received)
    }

    pub(crate) fn event(&self, id: u64) -> Vec<u8> {
        let mut r = self.rng(id, 1);
        let len = r.between(EVENT_BYTES.0, EVENT_BYTES.1) as usize;
        json_text(&mut r, len)
    }

    pub(crate) fn delivery(&self, id: u64) -> Vec<u8> {
        let mut r = self.rng(id, 2);
        let len = r.between(DELIVERY_BYTES.0, DELIVERY_BYTES.1) as usize;
        json_text(&mut r, len)
    }

    pub(crate) fn rows(&self, id: u64) -> [Row; 4] {
        let (endpoint, received) = self.index_fields(id);
        [
            (Table::Events, be(id), self.event(id)),
            (Table::Deliveries, be(id), self.delivery(id)),
            (Table::ByEndpoint, be2(endpoint, id), Vec::new()),
            (Table::ByTime, be2(received, id), Vec::new()),
        ]
    }

    pub(crate) fn keys(&self, id: u64) -> [(Table, Vec<u8>); 4] {
        let (endpoint, received) = self.index_fields(id);
        [
            (Table::Events, be(id)),
            (Table::Deliveries, be(id)),
            (Table::ByEndpoint, be2(endpoint, id)),
            (Table::ByTime, be2(received, id)),
        ]
    }

    /// The state blob: its first 8 bytes name the last id committed with it,
    /// which lets a full scan check that it saw one point in time.
    pub(crate) fn blob(&self, last_id: u64, len: usize) -> Vec<u8> {
        let mut r = self.rng(0, 3);
        let mut b = json_text(&mut r, len.max(8));
        b[..8].copy_from_slice(&last_id.to_be_bytes());
        b
    }

    /// The batch a snapshot point writes: records `first..first + n` and the blob.
    pub(crate) fn append_batch(&self, first: u64, n: u64, blob_len: usize) -> Batch {
        let mut puts = Vec::with_capacity(n as usize * 4 + 1);
        for id in first..first + n {
            puts.extend(self.rows(id));
        }
        puts.push((Table::Meta, STATE_KEY.to_vec(), self.blob(first + n - 1, blob_len)));
        Batch { puts, dels: Vec::new() }
    }
}
