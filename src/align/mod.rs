//! Alignment: admitting observations and combining them into frames.
//!
//! [`Aligner`] is the state machine; [`Watermarks`] and
//! [`AlignmentCounters`] are the parts of it that go into a snapshot.

mod aligner;
mod counters;
mod frame;
mod policy;
mod watermarks;

pub use aligner::{Admission, AlignError, Aligner, Row, RowFrame};
pub use counters::{AlignRejection, AlignmentCounters};
pub use frame::{Frame, Observation};
pub use policy::AlignmentPolicy;
pub use watermarks::Watermarks;
