//! cpulab: measure and explain how CPU placement, scheduling and system settings change an
//! application's speed.
//!
//! The library holds everything; the binary only parses the command line and maps errors to
//! exit codes. Layers, top down (docs/architecture.md has the rule for each): `cli`, the
//! `commands`, the `registry` of experiments, `trial`, `doctor` and `sim`, `compare`, the
//! experiments (`pingpong`, `pair`, `share`, `scale`, `oscost`, `messaging`, `bursty`, `watch`,
//! `host`, which never import each other), `probe`, the `experiment` interface, then the machine's facts
//! and the shared parts (`report`, `machine`, `counters`, `topology`, `load`, `signals`,
//! `output`, `stats`, `cpulist`). A module imports only layers below its own.

pub mod affinity;
pub mod bpf;
pub mod bursty;
pub mod cli;
pub mod commands;
pub mod compare;
pub mod counters;
pub mod cpulist;
pub mod doctor;
pub mod emit;
pub mod error;
pub mod experiment;
pub mod exporter;
pub mod fleet;
pub mod history;
pub mod host;
pub mod load;
pub mod machine;
pub mod messaging;
pub mod oscost;
pub mod output;
pub mod pair;
pub mod perf_event;
pub mod pingpong;
pub mod probe;
pub mod registry;
pub mod remedy;
pub mod report;
pub mod scale;
pub mod share;
pub mod signals;
pub mod sim;
pub mod stats;
#[cfg(test)]
pub(crate) mod testing;
pub mod topology;
pub mod trial;
pub mod units;
pub mod vmm;
pub mod wakeups;
pub mod watch;
