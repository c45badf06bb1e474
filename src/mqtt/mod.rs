//! MQTT adapters: payload parsing (pure) and, later, the client side.

pub mod payload;
