//! Alignment: admitting observations and combining them into frames.

mod frame;
mod policy;
mod watermarks;

pub use frame::{Frame, Observation};
pub use policy::AlignmentPolicy;
pub use watermarks::Watermarks;
