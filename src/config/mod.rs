//! Configuration: the worker's settings and a monitor's definition.

mod error;
mod monitor;

pub use error::{FieldError, FieldErrors};
pub use monitor::{MonitorConfig, ReadingConfig};
