//! The worker's one HTTP listener (`RADAR_METRICS_ADDR`):
//!
//! - `GET /metrics`: Prometheus text exposition of every `radar.*` metric,
//!   for an OpenTelemetry collector's Prometheus receiver or Prometheus.
//! - `GET /healthz`: `200 ok` while the process serves requests.
//! - `GET /readyz`: `200` when every admitted monitor is connected, else
//!   `503`; the JSON body lists each monitor that is not, with its state and
//!   why (see [`radar::telemetry::readiness`]).
//!
//! The server runs on its own actix-web worker thread, so a busy actor system
//! cannot delay a scrape or a health probe, and it installs no signal
//! handlers: the worker stops it through the handle of the returned server.

// Until the worker runtime calls `start` and `init_meter_provider`, only the
// tests use this module; the lead removes this line when wiring it.

mod exposition;
#[cfg(test)]
mod fleet_tests;
#[cfg(all(test, feature = "otlp"))]
mod otlp_tests;
#[cfg(test)]
mod tests;

use std::net::{SocketAddr, TcpListener};

use actix_web::{
    App, HttpResponse, HttpServer, Responder,
    dev::Server,
    http::{StatusCode, header::ContentType},
    web,
};
use prometheus::Registry;
use radar::telemetry::Board;

pub use exposition::init_meter_provider;

/// What the handlers read.
#[derive(Clone)]
struct Shared {
    registry: Registry,
    board: Board,
}

/// Binds `addr` and returns the server, which the caller must spawn (or
/// await) inside an actix System. Stop it with `server.handle().stop(true)`.
pub fn start(addr: SocketAddr, registry: Registry, board: Board) -> std::io::Result<Server> {
    serve(TcpListener::bind(addr)?, registry, board)
}

/// As [`start`], on a listener bound by the caller (tests bind port 0).
pub fn serve(listener: TcpListener, registry: Registry, board: Board) -> std::io::Result<Server> {
    let shared = Shared { registry, board };
    let server = HttpServer::new(move || App::new().configure(routes(shared.clone())))
        .workers(1)
        .disable_signals()
        .shutdown_timeout(5)
        .listen(listener)?
        .run();
    Ok(server)
}

fn routes(shared: Shared) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        cfg.app_data(web::Data::new(shared))
            .route("/metrics", web::get().to(metrics))
            .route("/healthz", web::get().to(healthz))
            .route("/readyz", web::get().to(readyz));
    }
}

async fn healthz() -> impl Responder {
    HttpResponse::Ok()
        .content_type(ContentType::plaintext())
        .body("ok\n")
}

async fn readyz(shared: web::Data<Shared>) -> impl Responder {
    let readiness = shared.board.readiness();
    let status = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    HttpResponse::build(status).json(readiness)
}

async fn metrics(shared: web::Data<Shared>) -> impl Responder {
    match exposition::render(&shared.registry, &shared.board) {
        Ok(text) => HttpResponse::Ok()
            .content_type(exposition::CONTENT_TYPE)
            .body(text),
        Err(e) => {
            tracing::error!(error = %e, "Could not render the metrics exposition.");
            HttpResponse::InternalServerError()
                .content_type(ContentType::plaintext())
                .body(format!("could not render metrics: {e}\n"))
        }
    }
}
