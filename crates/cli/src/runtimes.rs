//! The runtimes of `hookraft serve --delivery-threads N`: the main runtime
//! keeps the HTTP API, Raft gets one thread and the deliveries N threads
//! ([`hookraft_node::Runtimes`] says why). Without the flag everything
//! shares the main runtime.

use hookraft_node::Runtimes;

/// Raft mostly waits for its disk and its peers: one thread, woken at once.
pub const CONSENSUS_WORKER_THREADS: usize = 1;

/// Raft's and the deliveries' runtimes; keep them while the node runs and
/// drop them outside any async context (dropping waits for their threads).
pub struct NodeRuntimes {
    consensus: tokio::runtime::Runtime,
    delivery: tokio::runtime::Runtime,
}

impl NodeRuntimes {
    pub fn start(delivery_threads: usize) -> std::io::Result<Self> {
        let consensus = crate::allocator::runtime_builder()
            .worker_threads(CONSENSUS_WORKER_THREADS)
            .thread_name("hookraft-raft")
            .enable_all()
            .build()?;
        let delivery = crate::allocator::runtime_builder()
            .worker_threads(delivery_threads.max(1))
            .thread_name("hookraft-delivery")
            .enable_all()
            .build()?;
        Ok(Self { consensus, delivery })
    }

    pub fn handles(&self) -> Runtimes {
        Runtimes { consensus: Some(self.consensus.handle().clone()), delivery: Some(self.delivery.handle().clone()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raft_and_deliveries_run_on_threads_of_their_own() {
        let runtimes = NodeRuntimes::start(1).expect("runtimes start");
        let handles = runtimes.handles();
        let on = |handle: &tokio::runtime::Handle| {
            handle.block_on(handle.spawn(async { std::thread::current().name().map(str::to_owned) })).expect("task")
        };
        assert_eq!(on(handles.consensus.as_ref().expect("consensus")).as_deref(), Some("hookraft-raft"));
        assert_eq!(on(handles.delivery.as_ref().expect("delivery")).as_deref(), Some("hookraft-delivery"));
    }
}
