//! One request's KV handoff between a prefill worker and a decode worker, as a state machine:
//! an [`Event`] goes in (an engine fact, or how an issued step went), the next state and the
//! [`Action`]s to execute come out. It knows nothing of workers, routers or time; the
//! disaggregated topology executes the actions (FIFO, each at most once) and feeds back what
//! happened.
//!
//! INTERFACE
//! - [`Handoff::start`]: the first step for the side that goes first ([`Order`]).
//! - [`Handoff::on`]: applies one event, returns the steps it makes due ([`Steps`]).
//! - [`Handoff::result`]: `Some(success)` once the handoff is over.
//!
//! Active handoffs issue at most one step at a time. vLLM (source first): prefill, source
//! held, reserve the destination, destination reserved, transfer, transfer done, activate the
//! destination, release the source, complete. SGLang (destination first): reserve, reserved,
//! prefill, source held, then the same tail. A failure switches to clean-up: cancel whichever
//! sides were asked for (both at once), then complete unsuccessfully.

/// Which side of the handoff goes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Order {
    /// Prefill, then reserve the destination (vLLM).
    SourceFirst,
    /// Reserve the destination, then prefill (SGLang).
    DestinationFirst,
}

/// A step of the handoff, for the topology to execute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Action {
    SubmitPrefill,
    ReserveDestination,
    /// Move the prompt's KV; `missing_tokens` is what the destination lacks.
    StartTransfer {
        missing_tokens: usize,
    },
    ActivateDestination,
    ReleaseSource,
    CancelSource,
    CancelDestination,
    /// The handoff is over ([`Handoff::result`] says how).
    Complete,
}

/// How an executed step went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    Done,
    Failed,
}

/// What the handoff hears.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Event {
    /// The prefill finished; its worker keeps the prompt's KV.
    SourceHeld,
    /// The decode worker reserved KV; `transferable_tokens` of the prompt must be moved.
    DestinationReserved {
        transferable_tokens: usize,
    },
    TransferDone,
    /// Something outside a step failed (the prefill was refused): clean up.
    Failed,
    /// An issued step was executed.
    Stepped {
        action: Action,
        outcome: Outcome,
    },
}

/// Where an active handoff stands: the one fact it waits for next. Each step issues the action
/// that leads to that fact, so every phase names exactly what has been asked for so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Awaiting {
    /// The prefill was submitted; waiting for the source to hold the prompt's KV.
    Held,
    /// Source first: held, the destination reservation asked for; waiting for it.
    Reserved,
    /// Destination first: the reservation asked for; waiting for it.
    ReservedFirst,
    /// Destination first: reserved, the prefill submitted; waiting for the source to hold.
    HeldSecond { transferable_tokens: usize },
    /// Both sides ready, the transfer started; waiting for it to land.
    Transfer,
    /// The destination's activation asked for; waiting for it to be applied.
    Activation,
    /// The source's release asked for; waiting for it to be done.
    Release,
}

impl Awaiting {
    /// Whether the prefill was submitted (so the source must be cancelled on failure).
    fn submitted_prefill(self) -> bool {
        !matches!(self, Awaiting::ReservedFirst)
    }

    /// Whether the destination reservation was asked for (so it must be cancelled on failure).
    fn asked_destination(self) -> bool {
        !matches!(self, Awaiting::Held)
    }
}

/// One side's clean-up after a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cleanup {
    /// Never asked for: nothing to undo.
    Untouched,
    /// Its cancellation is issued and not yet done.
    Cancelling,
    Clean,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Active(Awaiting),
    CleaningUp {
        source: Cleanup,
        destination: Cleanup,
    },
    Complete {
        success: bool,
    },
}

/// The steps an event made due, in execution order (at most two: both clean-ups).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Steps([Option<Action>; 2]);

impl Steps {
    fn one(action: Action) -> Self {
        Self([Some(action), None])
    }

    fn push(&mut self, action: Action) {
        let slot = self.0.iter_mut().find(|slot| slot.is_none());
        *slot.expect("at most two steps at once") = Some(action);
    }
}

impl IntoIterator for Steps {
    type Item = Action;
    type IntoIter = std::iter::Flatten<std::array::IntoIter<Option<Action>, 2>>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter().flatten()
    }
}

/// One request's handoff.
#[derive(Clone, Debug)]
pub(super) struct Handoff {
    state: State,
}

impl Handoff {
    /// A new handoff and its first step.
    pub(super) fn start(order: Order) -> (Self, Action) {
        let (phase, first) = match order {
            Order::SourceFirst => (Awaiting::Held, Action::SubmitPrefill),
            Order::DestinationFirst => (Awaiting::ReservedFirst, Action::ReserveDestination),
        };
        let handoff = Self {
            state: State::Active(phase),
        };
        (handoff, first)
    }

    /// `Some(success)` once the handoff is over.
    pub(super) fn result(&self) -> Option<bool> {
        match self.state {
            State::Complete { success } => Some(success),
            _ => None,
        }
    }

    /// Applies `event`; returns the steps it makes due. A fact the current phase does not wait
    /// for (a repeat, or one arriving during clean-up) changes nothing.
    pub(super) fn on(&mut self, event: Event) -> Steps {
        match self.state {
            State::Complete { .. } => Steps::default(),
            State::Active(phase) => self.on_active(phase, event),
            State::CleaningUp { .. } => self.on_cleanup(event),
        }
    }

    fn on_active(&mut self, phase: Awaiting, event: Event) -> Steps {
        let (next, action) = match (phase, event) {
            (
                _,
                Event::Failed
                | Event::Stepped {
                    outcome: Outcome::Failed,
                    ..
                },
            ) => return self.fail(phase),
            (Awaiting::Held, Event::SourceHeld) => (Awaiting::Reserved, Action::ReserveDestination),
            (
                Awaiting::Reserved,
                Event::DestinationReserved {
                    transferable_tokens,
                },
            ) => (
                Awaiting::Transfer,
                Action::StartTransfer {
                    missing_tokens: transferable_tokens,
                },
            ),
            (
                Awaiting::ReservedFirst,
                Event::DestinationReserved {
                    transferable_tokens,
                },
            ) => (
                Awaiting::HeldSecond {
                    transferable_tokens,
                },
                Action::SubmitPrefill,
            ),
            (
                Awaiting::HeldSecond {
                    transferable_tokens,
                },
                Event::SourceHeld,
            ) => (
                Awaiting::Transfer,
                Action::StartTransfer {
                    missing_tokens: transferable_tokens,
                },
            ),
            (Awaiting::Transfer, Event::TransferDone) => {
                (Awaiting::Activation, Action::ActivateDestination)
            }
            (
                Awaiting::Activation,
                Event::Stepped {
                    action: Action::ActivateDestination,
                    ..
                },
            ) => (Awaiting::Release, Action::ReleaseSource),
            (
                Awaiting::Release,
                Event::Stepped {
                    action: Action::ReleaseSource,
                    ..
                },
            ) => {
                self.state = State::Complete { success: true };
                return Steps::one(Action::Complete);
            }
            _ => return Steps::default(),
        };
        self.state = State::Active(next);
        Steps::one(action)
    }

    /// Leaves the active path from `phase`: cancel each side that was asked for.
    fn fail(&mut self, phase: Awaiting) -> Steps {
        let side = |asked: bool| {
            if asked {
                Cleanup::Cancelling
            } else {
                Cleanup::Untouched
            }
        };
        let source = side(phase.submitted_prefill());
        let destination = side(phase.asked_destination());
        self.state = State::CleaningUp {
            source,
            destination,
        };
        let mut steps = Steps::default();
        if source == Cleanup::Untouched && destination == Cleanup::Untouched {
            self.state = State::Complete { success: false };
            steps.push(Action::Complete);
            return steps;
        }
        if source == Cleanup::Cancelling {
            steps.push(Action::CancelSource);
        }
        if destination == Cleanup::Cancelling {
            steps.push(Action::CancelDestination);
        }
        steps
    }

    /// A clean-up step done: mark its side clean; complete, unsuccessfully, once no side is
    /// still cancelling.
    fn on_cleanup(&mut self, event: Event) -> Steps {
        let State::CleaningUp {
            mut source,
            mut destination,
        } = self.state
        else {
            unreachable!("called only while cleaning up");
        };
        match event {
            Event::Stepped {
                action: Action::CancelSource | Action::ReleaseSource,
                outcome: Outcome::Done,
            } => source = Cleanup::Clean,
            Event::Stepped {
                action: Action::CancelDestination,
                outcome: Outcome::Done,
            } => destination = Cleanup::Clean,
            _ => return Steps::default(),
        }
        if source == Cleanup::Cancelling || destination == Cleanup::Cancelling {
            self.state = State::CleaningUp {
                source,
                destination,
            };
            return Steps::default();
        }
        self.state = State::Complete { success: false };
        Steps::one(Action::Complete)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(action: Action) -> Event {
        Event::Stepped {
            action,
            outcome: Outcome::Done,
        }
    }

    fn steps(handoff: &mut Handoff, event: Event) -> Vec<Action> {
        handoff.on(event).into_iter().collect()
    }

    #[test]
    fn source_first_runs_prefill_reserve_transfer_activate_release() {
        let (mut h, first) = Handoff::start(Order::SourceFirst);
        assert_eq!(first, Action::SubmitPrefill);
        assert!(steps(&mut h, done(Action::SubmitPrefill)).is_empty());
        assert_eq!(
            steps(&mut h, Event::SourceHeld),
            [Action::ReserveDestination]
        );
        assert!(steps(&mut h, done(Action::ReserveDestination)).is_empty());
        let reserved = Event::DestinationReserved {
            transferable_tokens: 96,
        };
        assert_eq!(
            steps(&mut h, reserved),
            [Action::StartTransfer { missing_tokens: 96 }]
        );
        // A repeated fact changes nothing.
        assert!(steps(&mut h, reserved).is_empty());
        let transfer = Action::StartTransfer { missing_tokens: 96 };
        assert!(steps(&mut h, done(transfer)).is_empty());
        assert_eq!(
            steps(&mut h, Event::TransferDone),
            [Action::ActivateDestination]
        );
        assert_eq!(
            steps(&mut h, done(Action::ActivateDestination)),
            [Action::ReleaseSource]
        );
        assert_eq!(h.result(), None);
        assert_eq!(
            steps(&mut h, done(Action::ReleaseSource)),
            [Action::Complete]
        );
        assert_eq!(h.result(), Some(true));
        // Nothing moves a finished handoff.
        assert!(steps(&mut h, Event::Failed).is_empty());
        assert_eq!(h.result(), Some(true));
    }

    #[test]
    fn destination_first_reserves_before_the_prefill() {
        let (mut h, first) = Handoff::start(Order::DestinationFirst);
        assert_eq!(first, Action::ReserveDestination);
        // The source cannot be held before its prefill was submitted; the reservation is what
        // lets the prefill go.
        let reserved = Event::DestinationReserved {
            transferable_tokens: 0,
        };
        assert_eq!(steps(&mut h, reserved), [Action::SubmitPrefill]);
        assert_eq!(
            steps(&mut h, Event::SourceHeld),
            [Action::StartTransfer { missing_tokens: 0 }]
        );
        assert_eq!(
            steps(&mut h, Event::TransferDone),
            [Action::ActivateDestination]
        );
    }

    #[test]
    fn a_failure_cancels_both_sides_then_completes_unsuccessfully() {
        let (mut h, _) = Handoff::start(Order::SourceFirst);
        steps(&mut h, done(Action::SubmitPrefill));
        steps(&mut h, Event::SourceHeld);
        let failed = Event::Stepped {
            action: Action::ReserveDestination,
            outcome: Outcome::Failed,
        };
        assert_eq!(
            steps(&mut h, failed),
            [Action::CancelSource, Action::CancelDestination]
        );
        // Facts of the active path are ignored while cleaning up.
        assert!(steps(&mut h, Event::TransferDone).is_empty());
        assert!(steps(&mut h, done(Action::CancelSource)).is_empty());
        assert_eq!(
            steps(&mut h, done(Action::CancelDestination)),
            [Action::Complete]
        );
        assert_eq!(h.result(), Some(false));
    }

    #[test]
    fn a_refused_prefill_before_any_reservation_only_cancels_the_source() {
        let (mut h, _) = Handoff::start(Order::SourceFirst);
        assert_eq!(steps(&mut h, Event::Failed), [Action::CancelSource]);
        assert_eq!(
            steps(&mut h, done(Action::CancelSource)),
            [Action::Complete]
        );
        assert_eq!(h.result(), Some(false));
    }

    #[test]
    fn a_failure_before_the_destination_first_prefill_only_cancels_the_destination() {
        let (mut h, _) = Handoff::start(Order::DestinationFirst);
        let refused = Event::Stepped {
            action: Action::ReserveDestination,
            outcome: Outcome::Failed,
        };
        assert_eq!(steps(&mut h, refused), [Action::CancelDestination]);
        // A reservation that lands during the clean-up starts nothing.
        let late = Event::DestinationReserved {
            transferable_tokens: 16,
        };
        assert!(steps(&mut h, late).is_empty());
        assert_eq!(
            steps(&mut h, done(Action::CancelDestination)),
            [Action::Complete]
        );
        assert_eq!(h.result(), Some(false));
    }
}
