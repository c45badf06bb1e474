use thiserror::Error;

/// One invalid value in a configuration, named by its dotted path.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// Dotted path of the offending field, e.g. `alignment.max_skew_ms`.
    pub field: String,
    /// What is wrong and what would be accepted.
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Every problem found in one configuration, so an operator fixes them in one go.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct FieldErrors(pub Vec<FieldError>);

impl FieldErrors {
    /// The names of the offending fields, in the order found.
    pub fn fields(&self) -> Vec<&str> {
        self.0.iter().map(|e| e.field.as_str()).collect()
    }
}
