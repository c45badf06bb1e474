//! Runtime decisions free of any actor framework: the model side of a
//! monitor, checkpoint triggers, retry pauses, shard assignment, exit reasons and the start plan
//! (`start`: fresh, restore or refuse, and the exit a refused graph run
//! takes). `radar-actors` carries them out.

mod checkpoint_policy;
mod core;
mod exit;
mod graph_run;
mod retry;
mod shard;
mod silence;
mod start;

pub use checkpoint_policy::{Attempt, CheckpointLimits, CheckpointPolicy, Trigger};
pub use core::{CoreError, ExportError, MonitorCore, Step, Verdict};
pub use exit::{ExitReason, Restart};
pub use retry::{FIRST_RETRY, RetryBackoff};
pub use shard::owns;
pub use silence::{Silence, SilenceChange};
pub use start::{RefusedRun, START_ATTEMPTS, StartPlan, retry_overtaken_start};
