//! The history's tables, their keys and a commit's batch.

// ---------------------------------------------------------------------------
// Tables and rows
// ---------------------------------------------------------------------------

/// The five logical tables; every engine stores the same rows in them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Table {
    /// event id (u64 BE) -> payload
    Events,
    /// delivery id (u64 BE) -> timeline
    Deliveries,
    /// endpoint id (u64 BE) ++ delivery id (u64 BE) -> empty
    ByEndpoint,
    /// received ms (u64 BE) ++ event id (u64 BE) -> empty
    ByTime,
    /// "state" -> the in-memory state blob written with each batch
    Meta,
}

pub(crate) const TABLES: [Table; 5] = [Table::Events, Table::Deliveries, Table::ByEndpoint, Table::ByTime, Table::Meta];

impl Table {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Table::Events => "events",
            Table::Deliveries => "deliveries",
            Table::ByEndpoint => "by_endpoint",
            Table::ByTime => "by_time",
            Table::Meta => "meta",
        }
    }

    /// One-byte prefix for engines that keep every table in one keyspace.
    pub(crate) fn tag(self) -> u8 {
        self as u8
    }
}

pub(crate) const STATE_KEY: &[u8] = b"state";
/// Above every key of every table (keys are at most 16 bytes).
pub(crate) const KEY_MAX: [u8; 17] = [0xff; 17];

pub(crate) type Row = (Table, Vec<u8>, Vec<u8>);
/// What a full scan calls for each row.
pub(crate) type Visit<'a> = dyn FnMut(Table, &[u8], &[u8]) + 'a;

/// One atomic, durable write.
#[derive(Default)]
pub(crate) struct Batch {
    pub(crate) puts: Vec<Row>,
    pub(crate) dels: Vec<(Table, Vec<u8>)>,
}

impl Batch {
    pub(crate) fn bytes(&self) -> u64 {
        self.puts.iter().map(|(_, k, v)| (k.len() + v.len()) as u64).sum()
    }
}

pub(crate) fn be(a: u64) -> Vec<u8> {
    a.to_be_bytes().to_vec()
}

pub(crate) fn be2(a: u64, b: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(16);
    k.extend_from_slice(&a.to_be_bytes());
    k.extend_from_slice(&b.to_be_bytes());
    k
}

pub(crate) fn id_of(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&key[..8]);
    u64::from_be_bytes(b)
}
