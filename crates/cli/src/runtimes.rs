//! The runtimes of `hookraft serve`: the caller's for the HTTP API, one for
//! Raft and one for the deliveries ([`hookraft_node::Runtimes`] says why).

use hookraft_node::Runtimes;

/// Raft mostly waits for its disk and its peers: one thread, woken at once.
pub const CONSENSUS_WORKER_THREADS: usize = 1;

/// The delivery runtime's threads unless the operator says otherwise: every
/// core but one, and at least one. Deliveries are the node's bulk work; the
/// core left over keeps accepting and committing events while every
/// endpoint is busy, so a delivery storm does not reach the producers.
pub fn delivery_threads_default() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    cores.saturating_sub(1).max(1)
}

/// The node's own runtimes; keep them while the node runs and drop them
/// outside any async context (dropping waits for their threads).
pub struct NodeRuntimes {
    consensus: tokio::runtime::Runtime,
    delivery: tokio::runtime::Runtime,
}

impl NodeRuntimes {
    pub fn start(delivery_threads: usize) -> std::io::Result<Self> {
        let consensus = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(CONSENSUS_WORKER_THREADS)
            .thread_name("hookraft-raft")
            .enable_all()
            .build()?;
        let delivery = tokio::runtime::Builder::new_multi_thread()
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
    fn deliveries_leave_a_core_to_the_rest_of_the_node_but_always_run() {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let threads = delivery_threads_default();
        assert!(threads >= 1);
        assert!(threads < cores || cores == 1);
    }

    #[test]
    fn runtimes_start_and_run_tasks_on_their_own_threads() {
        let runtimes = NodeRuntimes::start(1).expect("runtimes start");
        let handles = runtimes.handles();
        let on = |handle: &tokio::runtime::Handle| {
            handle.block_on(handle.spawn(async { std::thread::current().name().map(str::to_owned) })).expect("task")
        };
        assert_eq!(on(handles.consensus.as_ref().expect("consensus")).as_deref(), Some("hookraft-raft"));
        assert_eq!(on(handles.delivery.as_ref().expect("delivery")).as_deref(), Some("hookraft-delivery"));
    }
}
