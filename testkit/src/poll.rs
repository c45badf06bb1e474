//! Waiting for a condition: the one poll-until-deadline loop of the tests.
//!
//! A probe answers `Ok(value)` when the condition holds and `Err(seen)` with
//! what it saw when it does not yet; after the deadline the wait fails with
//! what it waited for and the last thing the probe saw, so a red test says
//! why. No test sleeps for a fixed time instead.
//!
//! ```no_run
//! # use std::time::Duration;
//! let n = radar_testkit::poll::within(Duration::from_secs(5))
//!     .blocking("the counter reaches 3", || {
//!         let n = 3; // read something
//!         if n >= 3 { Ok(n) } else { Err(n) }
//!     });
//! ```

use std::{
    fmt::Debug,
    time::{Duration, Instant},
};

use anyhow::{Result, bail};

/// How often a condition is checked unless [`Deadline::every`] says otherwise.
pub const INTERVAL: Duration = Duration::from_millis(100);

/// The interval for cheap in-process conditions (a counter, a channel).
pub const QUICK: Duration = Duration::from_millis(5);

/// Fails with `what` unless `condition` holds within `within`, checking
/// every [`INTERVAL`].
pub async fn wait_until(
    within_: Duration,
    what: &str,
    condition: impl FnMut() -> bool,
) -> Result<()> {
    within(within_).until(what, condition).await
}

/// A wait of at most `within`, checking every `every`.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    within: Duration,
    every: Duration,
}

/// A wait of at most `within`, checking every [`INTERVAL`].
pub fn within(within: Duration) -> Deadline {
    Deadline {
        within,
        every: INTERVAL,
    }
}

impl Deadline {
    /// Checks every `every` instead of every [`INTERVAL`].
    pub fn every(self, every: Duration) -> Self {
        Self { every, ..self }
    }

    /// Blocks until `probe` answers `Ok`; panics after the deadline with
    /// `what` and the last `Err` it answered.
    pub fn blocking<T, E: Debug>(self, what: &str, probe: impl FnMut() -> Result<T, E>) -> T {
        self.try_blocking(what, probe)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`Deadline::blocking`], failing with an error instead of a panic.
    pub fn try_blocking<T, E: Debug>(
        self,
        what: &str,
        mut probe: impl FnMut() -> Result<T, E>,
    ) -> Result<T> {
        let deadline = Instant::now() + self.within;
        loop {
            match probe() {
                Ok(value) => return Ok(value),
                Err(seen) => self.give_up_after(deadline, what, &seen)?,
            }
            std::thread::sleep(self.every);
        }
    }

    /// Waits (sleeping on the runtime) until the plain `probe` answers
    /// `Ok`; panics after the deadline with `what` and the last `Err`. The
    /// future is `Send` whenever the probe is, so it may run in a spawned task.
    pub async fn wait<T, E: Debug>(self, what: &str, probe: impl FnMut() -> Result<T, E>) -> T {
        self.try_wait(what, probe)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`Deadline::wait`], failing with an error instead of a panic.
    pub async fn try_wait<T, E: Debug>(
        self,
        what: &str,
        mut probe: impl FnMut() -> Result<T, E>,
    ) -> Result<T> {
        // Its own loop, not `try_wait_async`: an async closure would make
        // the future lose `Send` (the closure borrows what it captures).
        let deadline = Instant::now() + self.within;
        loop {
            match probe() {
                Ok(value) => return Ok(value),
                Err(seen) => self.give_up_after(deadline, what, &seen)?,
            }
            tokio::time::sleep(self.every).await;
        }
    }

    /// Waits until the async `probe` (a query, say) answers `Ok`; panics
    /// after the deadline with `what` and the last `Err` it answered.
    pub async fn wait_async<T, E: Debug>(
        self,
        what: &str,
        probe: impl AsyncFnMut() -> Result<T, E>,
    ) -> T {
        self.try_wait_async(what, probe)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`Deadline::wait_async`], failing with an error instead of a panic.
    pub async fn try_wait_async<T, E: Debug>(
        self,
        what: &str,
        mut probe: impl AsyncFnMut() -> Result<T, E>,
    ) -> Result<T> {
        let deadline = Instant::now() + self.within;
        loop {
            match probe().await {
                Ok(value) => return Ok(value),
                Err(seen) => self.give_up_after(deadline, what, &seen)?,
            }
            tokio::time::sleep(self.every).await;
        }
    }

    /// Waits until `read()` satisfies `condition` and returns that value;
    /// panics after the deadline with `what` and the last value read.
    pub async fn value<T: Debug>(
        self,
        what: &str,
        mut read: impl FnMut() -> T,
        condition: impl Fn(&T) -> bool,
    ) -> T {
        self.wait(what, || {
            let value = read();
            if condition(&value) {
                Ok(value)
            } else {
                Err(value)
            }
        })
        .await
    }

    /// Waits until `condition` holds; fails after the deadline with `what`.
    pub async fn until(self, what: &str, mut condition: impl FnMut() -> bool) -> Result<()> {
        self.try_wait(what, || check(condition(), || "the condition still false"))
            .await
    }

    /// After a probe answered `seen`: an error naming `what` and `seen`
    /// once the deadline has passed, else `Ok` to probe again.
    fn give_up_after(self, deadline: Instant, what: &str, seen: &dyn Debug) -> Result<()> {
        if Instant::now() >= deadline {
            bail!(
                "timed out after {:?} waiting until {what}; last seen: {seen:#?}",
                self.within
            )
        }
        Ok(())
    }
}

/// `Ok(())` when `holds`, else `Err(seen)`: a probe from a plain condition.
pub fn check<E>(holds: bool, seen: impl FnOnce() -> E) -> Result<(), E> {
    if holds { Ok(()) } else { Err(seen()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_that_holds_at_once_returns_its_value() {
        let value = within(Duration::from_millis(50)).blocking("ready", || Ok::<_, ()>(7));
        assert_eq!(value, 7);
    }

    #[test]
    fn a_condition_that_holds_later_is_waited_for() {
        let mut calls = 0;
        let value = within(Duration::from_secs(5))
            .every(Duration::from_millis(1))
            .blocking("the third call", || {
                calls += 1;
                check(calls >= 3, || calls).map(|()| calls)
            });
        assert_eq!(value, 3);
    }

    #[test]
    fn a_timeout_names_what_it_waited_for_and_what_it_last_saw() {
        let error = within(Duration::from_millis(20))
            .every(Duration::from_millis(1))
            .try_blocking("the door opens", || Err::<(), _>("door shut"))
            .expect_err("the door never opens");
        let message = error.to_string();
        assert!(message.contains("the door opens"), "{message}");
        assert!(message.contains("door shut"), "{message}");
    }

    #[tokio::test]
    async fn the_async_wait_polls_until_the_probe_answers() {
        let mut calls = 0;
        let value = within(Duration::from_secs(5))
            .every(Duration::from_millis(1))
            .wait_async("the second call", async || {
                calls += 1;
                check(calls >= 2, || calls).map(|()| calls)
            })
            .await;
        assert_eq!(value, 2);
    }

    #[tokio::test]
    async fn the_async_wait_fails_after_its_deadline() {
        let error = within(Duration::from_millis(20))
            .every(Duration::from_millis(1))
            .try_wait("never", || Err::<(), _>(41))
            .await
            .expect_err("never holds");
        assert!(error.to_string().contains("41"), "{error}");
    }
}
