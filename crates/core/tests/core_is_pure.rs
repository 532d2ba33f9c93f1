//! hookraft-core must stay pure (ARCHITECTURE §2): no runtime, network, storage,
//! actor or consensus crate may enter its dependency tree. This walks the
//! workspace's Cargo.lock from `hookraft-core` and fails if one does.

use std::collections::{BTreeMap, BTreeSet};

const FORBIDDEN: &[&str] = &["tokio", "axum", "hyper", "reqwest", "sled", "ractor", "openraft", "mio", "async-std"];

/// Package name → names of its dependencies, from Cargo.lock.
fn lock_graph(lock: &str) -> BTreeMap<String, Vec<String>> {
    let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for block in lock.split("[[package]]").skip(1) {
        let mut name = None;
        let mut deps = Vec::new();
        let mut in_deps = false;
        for line in block.lines().map(str::trim) {
            if let Some(n) = line.strip_prefix("name = ") {
                name = Some(n.trim_matches('"').to_string());
            } else if line.starts_with("dependencies = [") {
                in_deps = true;
            } else if in_deps && line == "]" {
                in_deps = false;
            } else if in_deps {
                // `"name"` or `"name version"` or `"name version (source)"`
                let dep = line.trim_matches(|c| c == '"' || c == ',').split(' ').next().unwrap_or_default();
                deps.push(dep.to_string());
            }
        }
        if let Some(name) = name {
            graph.entry(name).or_default().extend(deps);
        }
    }
    graph
}

#[test]
fn core_dependency_tree_has_no_runtime_network_storage_or_consensus_crate() {
    let lock_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock");
    let lock = std::fs::read_to_string(lock_path).expect("Cargo.lock at the workspace root");
    let graph = lock_graph(&lock);
    assert!(graph.contains_key("hookraft-core"), "hookraft-core is not in Cargo.lock");
    assert!(graph.contains_key("tokio"), "the walk must see tokio somewhere, or it proves nothing");

    let mut seen = BTreeSet::new();
    let mut stack = vec!["hookraft-core".to_string()];
    while let Some(name) = stack.pop() {
        if seen.insert(name.clone()) {
            stack.extend(graph.get(&name).into_iter().flatten().cloned());
        }
    }
    let bad: Vec<_> = FORBIDDEN.iter().filter(|f| seen.contains(**f)).collect();
    assert!(bad.is_empty(), "hookraft-core reaches {bad:?}; keep IO out of the pure core");
}
