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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Active,
    CleaningUp,
    Complete { success: bool },
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

/// What has been asked for and what has happened in one handoff.
#[derive(Clone, Debug)]
pub(super) struct Handoff {
    order: Order,
    mode: Mode,
    submit_issued: bool,
    held: bool,
    reserve_issued: bool,
    /// Known once the destination reserved.
    transferable_tokens: Option<usize>,
    transfer_issued: bool,
    transfer_completed: bool,
    activation_issued: bool,
    activation_applied: bool,
    release_issued: bool,
    source_cancel_issued: bool,
    source_cleanup_done: bool,
    destination_cancel_issued: bool,
    destination_cleanup_done: bool,
}

impl Handoff {
    /// A new handoff and its first step.
    pub(super) fn start(order: Order) -> (Self, Action) {
        let mut handoff = Self {
            order,
            mode: Mode::Active,
            submit_issued: false,
            held: false,
            reserve_issued: false,
            transferable_tokens: None,
            transfer_issued: false,
            transfer_completed: false,
            activation_issued: false,
            activation_applied: false,
            release_issued: false,
            source_cancel_issued: false,
            source_cleanup_done: false,
            destination_cancel_issued: false,
            destination_cleanup_done: false,
        };
        let first = match order {
            Order::SourceFirst => {
                handoff.submit_issued = true;
                Action::SubmitPrefill
            }
            Order::DestinationFirst => {
                handoff.reserve_issued = true;
                Action::ReserveDestination
            }
        };
        (handoff, first)
    }

    /// `Some(success)` once the handoff is over.
    pub(super) fn result(&self) -> Option<bool> {
        match self.mode {
            Mode::Complete { success } => Some(success),
            _ => None,
        }
    }

    /// Applies `event`; returns the steps it makes due. Facts repeated or arriving after the
    /// handoff left the active mode change nothing.
    pub(super) fn on(&mut self, event: Event) -> Steps {
        if self.result().is_some() {
            return Steps::default();
        }
        let active = self.mode == Mode::Active;
        match event {
            Event::SourceHeld if active && !self.held => self.held = true,
            Event::DestinationReserved {
                transferable_tokens,
            } if active && self.transferable_tokens.is_none() => {
                self.transferable_tokens = Some(transferable_tokens)
            }
            Event::TransferDone if active && !self.transfer_completed => {
                self.transfer_completed = true
            }
            Event::SourceHeld | Event::DestinationReserved { .. } | Event::TransferDone => {
                return Steps::default()
            }
            Event::Failed
            | Event::Stepped {
                outcome: Outcome::Failed,
                ..
            } => {
                self.mode = Mode::CleaningUp;
                return self.next_cleanup();
            }
            Event::Stepped {
                action,
                outcome: Outcome::Done,
            } => match action {
                Action::SubmitPrefill
                | Action::ReserveDestination
                | Action::StartTransfer { .. } => {}
                Action::ActivateDestination => self.activation_applied = true,
                Action::ReleaseSource | Action::CancelSource => self.source_cleanup_done = true,
                Action::CancelDestination => self.destination_cleanup_done = true,
                Action::Complete => return Steps::default(),
            },
        }
        match self.mode {
            Mode::Active => self.next_step().map(Steps::one).unwrap_or_default(),
            Mode::CleaningUp => self.next_cleanup(),
            Mode::Complete { .. } => Steps::default(),
        }
    }

    /// The next step of an active handoff, if one is due.
    fn next_step(&mut self) -> Option<Action> {
        let action = if self.order == Order::SourceFirst && self.held && !self.reserve_issued {
            self.reserve_issued = true;
            Action::ReserveDestination
        } else if self.order == Order::DestinationFirst
            && self.transferable_tokens.is_some()
            && !self.submit_issued
        {
            self.submit_issued = true;
            Action::SubmitPrefill
        } else if let (true, Some(missing_tokens), false) =
            (self.held, self.transferable_tokens, self.transfer_issued)
        {
            self.transfer_issued = true;
            Action::StartTransfer { missing_tokens }
        } else if self.transfer_completed && !self.activation_issued {
            self.activation_issued = true;
            Action::ActivateDestination
        } else if self.activation_applied && !self.release_issued {
            self.release_issued = true;
            Action::ReleaseSource
        } else if self.source_cleanup_done {
            self.mode = Mode::Complete { success: true };
            Action::Complete
        } else {
            return None;
        };
        Some(action)
    }

    /// The clean-up steps of a failed handoff: cancel each side that was asked for, then
    /// complete once both are clean.
    fn next_cleanup(&mut self) -> Steps {
        let mut steps = Steps::default();
        if self.submit_issued && !self.source_cancel_issued && !self.source_cleanup_done {
            self.source_cancel_issued = true;
            steps.push(Action::CancelSource);
        }
        if self.reserve_issued && !self.destination_cancel_issued && !self.destination_cleanup_done
        {
            self.destination_cancel_issued = true;
            steps.push(Action::CancelDestination);
        }
        if steps == Steps::default()
            && (!self.submit_issued || self.source_cleanup_done)
            && (!self.reserve_issued || self.destination_cleanup_done)
        {
            self.mode = Mode::Complete { success: false };
            steps.push(Action::Complete);
        }
        steps
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
}
