//! A breaker per transport (docs/delivery.md#a-breaker-per-transport): once a transport fails by itself
//! (a session cannot be opened: refused, a timeout, a `421` greeting; a transport plugin that is not
//! loaded or says it is rate-limited), this process stops spending attempts of individual emails on
//! it. Their jobs wait for the transport's signal instead (`JobError::Wait`, no CPU while they wait),
//! the transport is probed every few seconds (doubling up to [`LAST_PROBE`]), and the probe that
//! succeeds gives the signal: every waiting job runs at once.
//!
//! The state is per process; what waits is in the database. So every [`DISCOVER_EVERY`] the watch also
//! asks which transports some job waits for, and probes those it does not know down (a process that
//! parked them died, or another process did): nothing waits for a transport that is back.
//!
//! Must not import: salvo, surrealdb.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The first probe after a transport went down.
pub const FIRST_PROBE: Duration = Duration::from_secs(2);
/// Probes double their interval up to this, so a transport back from any outage is found within it.
pub const LAST_PROBE: Duration = Duration::from_secs(15);
/// How often the watch asks which transports some job waits for.
pub const DISCOVER_EVERY: Duration = Duration::from_secs(30);
/// The longest pause a rate-limited transport plugin is granted.
pub const LONGEST_PAUSE: Duration = Duration::from_secs(3600);

/// The signal of the jobs whose mail waits for `transport` (parked: no time of its own). Every
/// process may give it once `transport` answers.
pub fn signal(transport: &str) -> String {
    format!("transport:{transport}")
}

/// The signal of the jobs whose mail has a time of its own but goes sooner if `transport` comes back
/// from being down (a conversation broke off). Only a process that saw it down and back gives it, so
/// mail to a relay that merely drops connections keeps to its schedule.
pub fn back_signal(transport: &str) -> String {
    format!("transport-back:{transport}")
}

/// One transport known down.
#[derive(Debug, Clone)]
struct Down {
    reason: String,
    /// When it went down (the clock's ms), for those who show it.
    since_ms: i64,
    probe_at: Instant,
    interval: Duration,
    /// A probe is running.
    probing: bool,
}

/// A transport as the dashboard and `/metrics` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportState {
    pub name: String,
    /// None: up (or never found down).
    pub down: Option<(String, i64)>,
}

/// The transports this process found down.
#[derive(Default)]
pub struct Breakers {
    down: Mutex<HashMap<String, Down>>,
    /// Rung when a transport goes down, so the watch plans its probe.
    pub(super) changed: tokio::sync::Notify,
}

impl Breakers {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Down>> {
        self.down.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Why `transport` is down, or None when it is not known down.
    pub fn down(&self, transport: &str) -> Option<String> {
        self.map().get(transport).map(|d| d.reason.clone())
    }

    /// Marks `transport` down for `reason` (at `now_ms`); its first probe comes after `pause`, or after
    /// [`FIRST_PROBE`]. A transport already down keeps its probe plan and takes the newer reason.
    pub fn trip(&self, transport: &str, reason: &str, now_ms: i64, pause: Option<Duration>) {
        self.trip_at(transport, reason, now_ms, pause, Instant::now());
    }

    fn trip_at(&self, transport: &str, reason: &str, now_ms: i64, pause: Option<Duration>, now: Instant) {
        let mut map = self.map();
        match map.get_mut(transport) {
            Some(d) => d.reason = reason.to_string(),
            None => {
                let wait = pause.map_or(FIRST_PROBE, |p| p.min(LONGEST_PAUSE));
                tracing::warn!(transport, reason, "transport down: its mail waits until a probe finds it back");
                map.insert(
                    transport.to_string(),
                    Down {
                        reason: reason.to_string(),
                        since_ms: now_ms,
                        probe_at: now + wait,
                        interval: wait.clamp(FIRST_PROBE, LAST_PROBE),
                        probing: false,
                    },
                );
                crate::infra::metrics::transport_up(transport, false);
            }
        }
        drop(map);
        self.changed.notify_one();
    }

    /// The transports whose probe is due at `now` (each marked probing), and when the next one after
    /// them is.
    pub(super) fn due(&self, now: Instant) -> (Vec<String>, Option<Instant>) {
        let mut map = self.map();
        let mut due = Vec::new();
        for (name, d) in map.iter_mut().filter(|(_, d)| !d.probing) {
            if d.probe_at <= now {
                d.probing = true;
                due.push(name.clone());
            }
        }
        let next = map.values().filter(|d| !d.probing).map(|d| d.probe_at).min();
        (due, next)
    }

    /// A probe of `transport` failed at `now`: the next one waits twice as long (up to [`LAST_PROBE`]).
    pub(super) fn probe_failed(&self, transport: &str, reason: &str, now: Instant) {
        if let Some(d) = self.map().get_mut(transport) {
            d.interval = (d.interval * 2).min(LAST_PROBE);
            d.probe_at = now + d.interval;
            d.probing = false;
            d.reason = reason.to_string();
        }
        // The watch plans the next probe.
        self.changed.notify_one();
    }

    /// `transport` answers again.
    pub(super) fn recovered(&self, transport: &str) {
        if self.map().remove(transport).is_some() {
            tracing::info!(transport, "transport back: its waiting mail goes now");
        }
        crate::infra::metrics::transport_up(transport, true);
    }

    /// Every transport of `names` with its state.
    pub fn states<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Vec<TransportState> {
        let map = self.map();
        names
            .into_iter()
            .map(|n| TransportState { name: n.to_string(), down: map.get(n).map(|d| (d.reason.clone(), d.since_ms)) })
            .collect()
    }
}

/// What a project sees of delivery: its deferred emails and the transports as this process sees them.
#[derive(Debug, Clone)]
pub struct Status {
    pub deferred: i64,
    pub transports: Vec<TransportState>,
}

impl super::Delivery {
    /// The project's deferred emails and every transport's state in this process (docs/delivery.md).
    pub async fn status(&self, store: &crate::store::Store, project: &str) -> Result<Status, crate::store::StoreError> {
        let deferred = store.deferred_emails_of(Some(project)).await?;
        let names = self.transport_names();
        Ok(Status { deferred, transports: self.breakers.states(names.iter().map(String::as_str)) })
    }

    /// Every transport name this process knows: its own, the default, and the loaded transport plugins.
    fn transport_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.transports.keys().cloned().collect();
        names.push(self.default_transport.clone());
        names.extend(self.plugins.transports());
        names.sort_unstable();
        names.dedup();
        names
    }

    /// Watches the transports until `stop`: probes each transport found down when its probe is due,
    /// and every [`DISCOVER_EVERY`] the transports some job waits for that this process does not know
    /// down; a transport that answers gives its signal (its waiting jobs run now). A loop that sleeps
    /// until its next probe, so waiting mail costs nothing.
    pub async fn watch(
        self: std::sync::Arc<Self>,
        store: crate::store::Store,
        clock: crate::infra::clock::SharedClock,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        // Every transport is up until found down (`herald_transport_up` lists each from the start).
        for t in self.transport_names() {
            if self.breakers.down(&t).is_none() {
                crate::infra::metrics::transport_up(&t, true);
            }
        }
        let mut next_discovery = Instant::now();
        loop {
            let (due, next_probe) = self.breakers.due(Instant::now());
            for t in due {
                let (me, store, clock) = (self.clone(), store.clone(), clock.clone());
                tokio::spawn(async move { me.probe_and_release(&t, &store, &clock).await });
            }
            if Instant::now() >= next_discovery {
                next_discovery = Instant::now() + DISCOVER_EVERY;
                let signals: Vec<String> = self.transport_names().iter().map(|t| signal(t)).collect();
                match store.awaited_signals(&signals).await {
                    Ok(awaited) => {
                        for t in awaited.iter().filter_map(|s| s.strip_prefix("transport:")) {
                            if self.breakers.down(t).is_none() {
                                self.probe_and_release(t, &store, &clock).await;
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot read which transports mail waits for"),
                }
            }
            let wake_at = next_probe.map_or(next_discovery, |p| p.min(next_discovery));
            tokio::select! {
                _ = tokio::time::sleep_until(wake_at) => {}
                _ = self.breakers.changed.notified() => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// Whether a transport answers: an SMTP session opened and closed; the file transport always; a
    /// transport plugin when it is loaded (its next call says more).
    pub async fn probe(&self, transport: &str) -> Result<(), String> {
        let plugin = match self.transports.get(transport) {
            Some(super::Transport::Smtp(pool)) => return pool.probe().await,
            Some(super::Transport::File(_)) => return Ok(()),
            Some(super::Transport::Plugin(p)) => p.as_str(),
            None => transport,
        };
        match self.plugins.transports().iter().any(|t| t == plugin) {
            true => Ok(()),
            false => Err(format!("no loaded transport plugin is called {plugin}")),
        }
    }

    /// Probes `transport`; when it answers, it is up and its waiting mail goes now.
    async fn probe_and_release(
        &self,
        transport: &str,
        store: &crate::store::Store,
        clock: &crate::infra::clock::SharedClock,
    ) {
        match self.probe(transport).await {
            Err(why) => {
                if self.breakers.down(transport).is_some() {
                    self.breakers.probe_failed(transport, &why, Instant::now());
                } else {
                    self.breakers.trip(transport, &why, clock.now_ms(), None);
                }
            }
            Ok(()) => {
                let was_down = self.breakers.down(transport).is_some();
                self.breakers.recovered(transport);
                let mut signals = vec![signal(transport)];
                if was_down {
                    signals.push(back_signal(transport));
                }
                let released = async {
                    let mut moved = 0;
                    for s in &signals {
                        moved += store.signal_jobs(s, clock.now_ms()).await?;
                    }
                    Ok::<_, crate::store::StoreError>(moved)
                };
                match released.await {
                    Ok(moved) => {
                        if moved > 0 {
                            tracing::info!(
                                transport,
                                jobs = moved,
                                "delivery jobs that waited for the transport run now"
                            );
                        }
                        if let Some(w) = self.wake.get() {
                            w.kinds([super::DELIVER_JOB, super::DELIVER_CAMPAIGN_JOB]);
                        }
                    }
                    // Left waiting: the next discovery finds them and tries again.
                    Err(e) => tracing::warn!(transport, error = %e, "cannot release the mail waiting for a transport"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tripped_transport_is_probed_at_growing_intervals_until_it_recovers() {
        let b = Breakers::default();
        let t0 = Instant::now();
        assert_eq!(b.down("relay"), None);
        b.trip_at("relay", "refused", 7, None, t0);
        assert_eq!(b.down("relay").as_deref(), Some("refused"));
        assert_eq!(b.states(["relay", "other"])[0].down, Some(("refused".into(), 7)));
        assert_eq!(b.states(["relay", "other"])[1].down, None);
        // Not due before its first probe, then due once (a running probe is not planned twice).
        assert!(b.due(t0).0.is_empty());
        let mut now = t0 + FIRST_PROBE;
        assert_eq!(b.due(now).0, vec!["relay".to_string()]);
        assert!(b.due(now).0.is_empty(), "a probe already runs");
        // Each failure doubles the wait, up to the last interval.
        let mut waits = Vec::new();
        for _ in 0..6 {
            b.probe_failed("relay", "still refused", now);
            let next = b.due(now).1.unwrap();
            waits.push((next - now).as_secs());
            assert!(b.due(next - Duration::from_millis(1)).0.is_empty());
            now = next;
            assert_eq!(b.due(now).0.len(), 1);
        }
        assert_eq!(waits, [4, 8, 15, 15, 15, 15]);
        // Tripping again while down keeps the plan and takes the newer reason.
        b.trip_at("relay", "timeout", 9, None, now);
        assert_eq!(b.down("relay").as_deref(), Some("timeout"));
        b.recovered("relay");
        assert_eq!(b.down("relay"), None);
        assert_eq!(b.due(now + LAST_PROBE), (vec![], None), "nothing left to probe");
    }

    #[test]
    fn a_rate_limited_transport_is_paused_as_long_as_it_asked_within_an_hour() {
        let b = Breakers::default();
        let t0 = Instant::now();
        b.trip_at("ses", "rate limited", 0, Some(Duration::from_secs(10)), t0);
        assert!(b.due(t0 + Duration::from_secs(9)).0.is_empty());
        assert_eq!(b.due(t0 + Duration::from_secs(10)).0.len(), 1);
        b.trip_at("slow", "rate limited", 0, Some(Duration::from_secs(86_400)), t0);
        assert_eq!(b.due(t0).1, Some(t0 + LONGEST_PAUSE));
    }
}
