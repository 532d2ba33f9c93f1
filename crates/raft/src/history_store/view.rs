//! [`HistoryView`]: one commit of a history store, read in one redb read
//! transaction.

use super::*;

/// One commit of the store, read in one redb read transaction: every read
/// and an export see the same cut however many flushes commit meanwhile.
pub struct HistoryView {
    pub(super) tx: ReadTransaction,
}

impl std::fmt::Debug for HistoryView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistoryView").finish_non_exhaustive()
    }
}

impl HistoryView {
    pub(super) fn table(&self, table: Table) -> Result<ReadRows, Error> {
        Ok(self.tx.open_table(table.definition())?)
    }

    pub(super) fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.table(table)?.get(key)?.map(|value| value.value().to_vec()))
    }

    /// Up to `limit` rows of `table` within the bounds, in key order or
    /// the reverse, each turned into a `T` by `row`.
    pub(super) fn page<T>(
        &self,
        table: Table,
        (lower, upper): (Bound<&[u8]>, Bound<&[u8]>),
        newest_first: bool,
        limit: usize,
        mut row: impl FnMut(&[u8], &[u8]) -> Result<T, Error>,
    ) -> Result<Vec<T>, Error> {
        if limit == 0 || is_empty_range(lower, upper) {
            return Ok(Vec::new());
        }
        let rows = self.table(table)?;
        let range = rows.range((lower, upper))?;
        let range: Box<dyn Iterator<Item = _>> = if newest_first { Box::new(range.rev()) } else { Box::new(range) };
        let mut page = Vec::new();
        for entry in range.take(limit) {
            let (key, value) = entry?;
            page.push(row(key.value(), value.value())?);
        }
        Ok(page)
    }

    pub(super) fn counts_of_view(&self) -> Result<StoreCounts, Error> {
        read_counts(&self.table(Table::Meta)?)
    }

    /// The stored state's chunks in order; concatenated, they are the
    /// state of the flush this view reads (empty before any flush).
    pub fn state_chunks(&self) -> Result<impl Iterator<Item = Result<Vec<u8>, Error>> + use<>, Error> {
        let rows = self.table(Table::State)?.range_owned(..)?;
        Ok(rows.zip(0u64..).map(|(entry, number)| {
            let (key, value) = entry?;
            if key.value() != chunk_key(number) {
                return Err(Error::Corrupt(format!("the history store's state lacks its chunk {number}")));
            }
            Ok(value.value().to_vec())
        }))
    }

    /// The stored state, whole.
    pub fn state(&self) -> Result<Vec<u8>, Error> {
        let mut state = Vec::new();
        for chunk in self.state_chunks()? {
            state.extend_from_slice(&chunk?);
        }
        Ok(state)
    }

    /// The applied log position the flush this view reads stored with it,
    /// as it was given; none before the first flush.
    pub fn applied(&self) -> Result<Option<Vec<u8>>, Error> {
        self.get(Table::Meta, META_APPLIED)
    }

    /// Writes every row of every table of this view to `out` as one stream
    /// (see the module's comment), holding one row at a time, and returns
    /// the bytes written.
    pub fn export(&self, out: &mut (impl Write + ?Sized)) -> Result<u64, Error> {
        let mut stream = StreamWriter::new(out);
        stream.header(self.counts_of_view()?)?;
        for table in Table::ALL {
            stream.table(table)?;
            for entry in self.table(table)?.range(..)? {
                let (key, value) = entry?;
                stream.row(key.value(), value.value())?;
            }
        }
        stream.end()
    }
}

impl HistoryStore for HistoryView {
    fn event(&self, id: &EventId) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(Table::Events, &id.to_bytes()).map_err(store_error)
    }

    fn delivery(&self, id: &DeliveryId) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(Table::Deliveries, &id.to_bytes()).map_err(store_error)
    }

    fn events(
        &self,
        range: IdRange<EventId>,
        newest_first: bool,
        limit: usize,
    ) -> Result<Vec<(EventId, Vec<u8>)>, StoreError> {
        let bounds = id_bounds(&range, EventId::to_bytes);
        self.page(Table::Events, as_slices(&bounds), newest_first, limit, |key, value| {
            Ok((EventId::from_bytes(id16(Table::Events, key)?), value.to_vec()))
        })
        .map_err(store_error)
    }

    fn deliveries(
        &self,
        range: IdRange<DeliveryId>,
        newest_first: bool,
        limit: usize,
    ) -> Result<Vec<(DeliveryId, Vec<u8>)>, StoreError> {
        let bounds = id_bounds(&range, DeliveryId::to_bytes);
        self.page(Table::Deliveries, as_slices(&bounds), newest_first, limit, |key, value| {
            Ok((DeliveryId::from_bytes(id16(Table::Deliveries, key)?), value.to_vec()))
        })
        .map_err(store_error)
    }

    fn dead(
        &self,
        endpoint: &EndpointId,
        range: IdRange<DeliveryId>,
        newest_first: bool,
        limit: usize,
    ) -> Result<Vec<DeliveryId>, StoreError> {
        let bounds = dead_bounds(endpoint, &range);
        self.page(Table::Dead, as_slices(&bounds), newest_first, limit, |key, _| {
            let id = key.get(16..).ok_or_else(|| bad_key(Table::Dead, key))?;
            Ok(DeliveryId::from_bytes(id16(Table::Dead, id)?))
        })
        .map_err(store_error)
    }

    fn received(&self, after: Option<(u64, EventId)>, limit: usize) -> Result<Vec<(u64, EventId)>, StoreError> {
        let lower = after.map_or(Bound::Unbounded, |(at, id)| Bound::Excluded(time_key(at, &id)));
        let bounds = (lower, Bound::Unbounded);
        self.page(Table::ByTime, as_slices(&bounds), false, limit, |key, _| parse_time_key(key)).map_err(store_error)
    }

    fn counts(&self) -> Result<StoreCounts, StoreError> {
        self.counts_of_view().map_err(store_error)
    }
}
