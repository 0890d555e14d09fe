//! Hand-over slots: at most [`super::HANDOVERS`] campaign emails of this process are SENDING at once
//! (claimed, outcome not yet written), which bounds what a crash can leave UNCERTAIN.
//!
//! A slot goes from one hand-over to the next *with the outcome of the last one still to write*: the
//! next email's claim carries it, so one ledger round writes the outcome of hand-over *k* and the claim
//! of *k + 1* together (`ledger::Carried`). Each slot therefore has at most one SENDING email at every
//! commit, and a campaign email waits for one ledger round per hand-over instead of two. When nobody
//! waits for a slot, the outcome is written on its own before the slot is free again.
//!
//! Must not import: salvo, surrealdb.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::ledger::{Carried, Ledger};
use crate::store::emails::DeliveryOutcome;
use crate::store::events::Event;

/// The process's hand-over slots.
pub struct Handovers {
    state: Mutex<State>,
    ledger: Ledger,
}

struct State {
    free: usize,
    /// Waiting for a slot, oldest first.
    waiting: VecDeque<oneshot::Sender<Slot>>,
}

/// One hand-over slot, held from the claim until the outcome is written or passed on. Dropping it (an
/// error path) writes what it carries and frees it.
pub struct Slot {
    owner: Arc<Handovers>,
    carried: Option<Carried>,
    live: bool,
}

impl Handovers {
    pub fn new(slots: usize, ledger: Ledger) -> Arc<Handovers> {
        Arc::new(Handovers { state: Mutex::new(State { free: slots, waiting: VecDeque::new() }), ledger })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a slot (first come, first served).
    pub async fn acquire(self: &Arc<Self>) -> Slot {
        let waiting = {
            let mut st = self.state();
            if st.free > 0 {
                st.free -= 1;
                None
            } else {
                let (tx, rx) = oneshot::channel();
                st.waiting.push_back(tx);
                Some(rx)
            }
        };
        match waiting {
            None => Slot { owner: self.clone(), carried: None, live: true },
            // The sender lives in `state` until it hands over a slot, and `self` is alive here.
            Some(rx) => rx.await.unwrap_or_else(|_| Slot { owner: self.clone(), carried: None, live: true }),
        }
    }

    /// Hands a slot carrying `carried` to the oldest waiter still waiting; gives `carried` back when
    /// nobody waits.
    fn offer(self: &Arc<Self>, st: &mut State, mut carried: Option<Carried>) -> Result<(), Option<Carried>> {
        while let Some(w) = st.waiting.pop_front() {
            match w.send(Slot { owner: self.clone(), carried: carried.take(), live: true }) {
                Ok(()) => return Ok(()),
                // The waiter gave up: that slot is no one's.
                Err(mut back) => {
                    back.live = false;
                    carried = back.carried.take();
                }
            }
        }
        Err(carried)
    }

    /// Hands a slot to the oldest waiter, or frees it. Never called with an outcome still to write.
    fn release(self: &Arc<Self>) {
        let mut st = self.state();
        if self.offer(&mut st, None).is_err() {
            st.free += 1;
        }
    }

    /// Ends a hand-over: its outcome rides with the next claim of the slot when someone waits for one,
    /// else it is written on its own; then the slot goes on. Answers when the outcome is durable.
    pub async fn pass(
        self: &Arc<Self>,
        mut slot: Slot,
        outcomes: Vec<DeliveryOutcome>,
        events: Vec<Event>,
    ) -> Result<(), String> {
        slot.live = false;
        // What the slot still carries (its holder was never claimed: no session, or cancelled early) is
        // written first.
        if let Some(old) = slot.carried.take() {
            let done = self.ledger.record(old.outcomes, old.events, true).await;
            let _ = old.reply.send(done);
        }
        let (reply, written) = oneshot::channel();
        let offered = self.offer(&mut self.state(), Some(Carried { outcomes, events, reply }));
        match offered {
            // Passed on: written with the next claim.
            Ok(()) => written.await.map_err(|_| "the delivery ledger stopped".to_string())?,
            // Nobody waits: written now, and only then is the slot free.
            Err(c) => {
                let done = match c {
                    Some(c) => self.ledger.record(c.outcomes, c.events, true).await,
                    None => Ok(()),
                };
                self.release();
                done
            }
        }
    }
}

impl Slot {
    /// The outcome of the slot's last hand-over, for the claim that takes the slot on.
    pub fn take_carried(&mut self) -> Option<Carried> {
        self.carried.take()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.live {
            return;
        }
        let owner = self.owner.clone();
        match self.carried.take() {
            None => owner.release(),
            // Written before the slot is free, so no slot ever has two SENDING emails.
            Some(c) => match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    rt.spawn(async move {
                        let done = owner.ledger.record(c.outcomes, c.events, true).await;
                        let _ = c.reply.send(done);
                        owner.release();
                    });
                }
                Err(_) => {
                    let _ = c.reply.send(Err("delivery is shutting down".into()));
                    owner.release();
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::domain::status::EmailStatus;
    use crate::store::Store;

    fn sent(id: &str) -> DeliveryOutcome {
        DeliveryOutcome::new(id, None, EmailStatus::Sent, None)
    }

    /// A second email waiting for the slot `held`, and `held` passed on with the outcome of email `id`:
    /// (the waiter, the pass).
    async fn pass_to_a_waiter(
        h: &Arc<Handovers>,
        held: Slot,
        id: &str,
    ) -> (tokio::task::JoinHandle<Slot>, tokio::task::JoinHandle<Result<(), String>>) {
        let waiter = tokio::spawn({
            let h = h.clone();
            async move { h.acquire().await }
        });
        while h.state().waiting.is_empty() {
            tokio::task::yield_now().await;
        }
        let outcome = sent(id);
        let passing = tokio::spawn({
            let h = h.clone();
            async move { h.pass(held, vec![outcome], vec![]).await }
        });
        (waiter, passing)
    }

    #[tokio::test]
    async fn a_slot_carries_its_outcome_to_the_next_holder_or_writes_it_when_nobody_waits() {
        let store = Store::connect(&Config::for_tests()).await.unwrap();
        let clock: crate::infra::clock::SharedClock = Arc::new(crate::infra::clock::ManualClock::new(0));
        let h = Handovers::new(1, Ledger::start(store, clock));
        let first = h.acquire().await;
        assert_eq!(h.state().free, 0);

        // Someone waits: the slot goes to it with the outcome, and the pass answers only once the
        // waiter's claim has written it.
        let (waiter, passing) = pass_to_a_waiter(&h, first, "a").await;
        let mut second = waiter.await.unwrap();
        let carried = second.take_carried().expect("the slot carries the last outcome");
        assert_eq!(carried.outcomes.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(), ["a"]);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!passing.is_finished(), "not durable before the claim that carries it is written");
        let _ = carried.reply.send(Ok(()));
        assert_eq!(passing.await.unwrap(), Ok(()));
        assert_eq!(h.state().free, 0, "the slot went on, it was not freed");

        // Nobody waits: the outcome is written at once, then the slot is free.
        h.pass(second, vec![sent("b")], vec![]).await.unwrap();
        assert_eq!(h.state().free, 1);

        // A slot dropped on an error path is freed, and one that still carries an outcome writes it.
        let third = h.acquire().await;
        drop(third);
        assert_eq!(h.state().free, 1);
        let fourth = h.acquire().await;
        let (waiter, passing) = pass_to_a_waiter(&h, fourth, "c").await;
        drop(waiter.await.unwrap());
        assert_eq!(passing.await.unwrap(), Ok(()), "the dropped slot wrote what it carried");
        while h.state().free == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(h.state().free, 1);
    }
}
