//! Runtime decisions free of any actor framework: checkpoint triggers,
//! shard assignment and exit reasons. `radar-actors` carries them out.

mod checkpoint_policy;
mod exit;
mod shard;

pub use checkpoint_policy::{CheckpointLimits, CheckpointPolicy, Trigger};
pub use exit::{ExitReason, Restart};
pub use shard::owns;
