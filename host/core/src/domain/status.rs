//! The statuses of emails, campaigns, sender domains, jobs and workflow executions: one enum each, with one string form each
//! (the form the database stores, the API shows and queries compare against). Code names a status by its
//! variant, never by a string literal.

use serde::{Deserialize, Serialize};

/// Defines a status enum with its one string form, `as_str`, `parse`, `ALL` and `Display`.
macro_rules! status {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant,)+
        }

        impl $name {
            /// Every status, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The status's one string form.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The status with this string form.
            pub fn parse(s: &str) -> Option<$name> {
                match s {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

status! {
    /// Where an email is (docs/behaviour.md#delivery-and-email-statuses).
    EmailStatus {
        /// Written, waiting for delivery.
        Pending = "PENDING",
        /// Claimed by a delivery (campaign mail: its hand-over began).
        Sending = "SENDING",
        /// A temporary failure: tried again on its schedule, or when its transport is back, until its
        /// give-up window ends (docs/delivery.md#deferral).
        Deferred = "DEFERRED",
        /// The transport accepted it.
        Sent = "SENT",
        /// A hand-over a crash interrupted: the transport may or may not have taken it (never resent).
        Uncertain = "UNCERTAIN",
        Delivered = "DELIVERED",
        Opened = "OPENED",
        Clicked = "CLICKED",
        Bounced = "BOUNCED",
        Complained = "COMPLAINED",
        /// Delivery gave up after its attempts.
        Failed = "FAILED",
        /// Its campaign was cancelled before it was handed over.
        Cancelled = "CANCELLED",
        /// Not sent: its recipient is on the project's suppression list (docs/behaviour.md#suppressions).
        Suppressed = "SUPPRESSED",
    }
}

status! {
    /// Where a campaign is (docs/behaviour.md#campaigns).
    CampaignStatus {
        Draft = "DRAFT",
        Scheduled = "SCHEDULED",
        Sending = "SENDING",
        Sent = "SENT",
        Cancelled = "CANCELLED",
    }
}

status! {
    /// Whether a sender domain's records check out (docs/behaviour.md#domains).
    DomainStatus {
        Pending = "PENDING",
        Verified = "VERIFIED",
        Failed = "FAILED",
    }
}

status! {
    /// Where a job of the durable queue is.
    JobStatus {
        Queued = "queued",
        Running = "running",
        Completed = "completed",
        /// Given up: its attempts ran out, or it kept dying with the process.
        Dead = "dead",
        /// A delivery of a suspended project, waiting until the suspension is lifted.
        Held = "held",
    }
}

status! {
    /// Where a contact job (a bulk change or a CSV import) is, as its status endpoint says
    /// (docs/behaviour.md#bulk-changes-and-import).
    ContactJobState {
        Queued = "queued",
        Active = "active",
        Completed = "completed",
        Failed = "failed",
    }
}

status! {
    /// Where a workflow execution is (docs/behaviour.md#workflows).
    ExecutionStatus {
        /// Its steps are running (or queued to run).
        Running = "RUNNING",
        /// Waiting for a delay, an event or a timeout.
        Waiting = "WAITING",
        /// It reached a step with nothing after it.
        Completed = "COMPLETED",
        /// It reached an EXIT step.
        Exited = "EXITED",
        Failed = "FAILED",
        Cancelled = "CANCELLED",
    }
}

status! {
    /// Where one step of an execution is.
    StepRunStatus {
        Running = "RUNNING",
        Waiting = "WAITING",
        Completed = "COMPLETED",
        Failed = "FAILED",
        /// It had nothing to do (for example a marketing email to an unsubscribed contact).
        Skipped = "SKIPPED",
        Cancelled = "CANCELLED",
    }
}

status! {
    /// Where a project stands against its bounce and complaint thresholds.
    ProjectStanding {
        Active = "ACTIVE",
        /// A 7-day rate at or above half its threshold.
        Warning = "WARNING",
        /// Suspended: its sending is refused and its deliveries are held.
        Suspended = "SUSPENDED",
    }
}

status! {
    /// Where a webhook delivery is (docs/behaviour.md#webhooks).
    DeliveryStatus {
        /// Waiting for its next attempt.
        Pending = "PENDING",
        /// The endpoint answered 2xx.
        Succeeded = "SUCCEEDED",
        /// Every attempt failed, or its endpoint was disabled or deleted.
        Failed = "FAILED",
    }
}

impl ExecutionStatus {
    /// RUNNING or WAITING: the execution still has steps ahead.
    pub const fn is_active(self) -> bool {
        matches!(self, ExecutionStatus::Running | ExecutionStatus::Waiting)
    }
}

impl EmailStatus {
    /// Rank in the order a status may only move up: PENDING/SENDING/DEFERRED < SENT/UNCERTAIN < DELIVERED <
    /// OPENED < CLICKED < BOUNCED < COMPLAINED. FAILED, CANCELLED and SUPPRESSED are final and have no rank.
    /// UNCERTAIN ranks with SENT: a later notification, open or click shows the message did go.
    pub const fn rank(self) -> Option<u8> {
        Some(match self {
            EmailStatus::Pending | EmailStatus::Sending | EmailStatus::Deferred => 0,
            EmailStatus::Sent | EmailStatus::Uncertain => 1,
            EmailStatus::Delivered => 2,
            EmailStatus::Opened => 3,
            EmailStatus::Clicked => 4,
            EmailStatus::Bounced => 5,
            EmailStatus::Complained => 6,
            EmailStatus::Failed | EmailStatus::Cancelled | EmailStatus::Suppressed => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_status_has_one_string_form_that_round_trips() {
        fn check<T: Copy + PartialEq + std::fmt::Debug + Serialize>(
            all: &[T],
            text: fn(T) -> &'static str,
            parse: fn(&str) -> Option<T>,
        ) {
            for s in all {
                assert_eq!(parse(text(*s)), Some(*s));
                assert_eq!(serde_json::to_value(s).unwrap(), serde_json::Value::String(text(*s).into()));
            }
        }
        check(EmailStatus::ALL, EmailStatus::as_str, EmailStatus::parse);
        check(CampaignStatus::ALL, CampaignStatus::as_str, CampaignStatus::parse);
        check(DomainStatus::ALL, DomainStatus::as_str, DomainStatus::parse);
        check(JobStatus::ALL, JobStatus::as_str, JobStatus::parse);
        check(ContactJobState::ALL, ContactJobState::as_str, ContactJobState::parse);
        check(ExecutionStatus::ALL, ExecutionStatus::as_str, ExecutionStatus::parse);
        check(StepRunStatus::ALL, StepRunStatus::as_str, StepRunStatus::parse);
        assert_eq!(EmailStatus::ALL.len(), 13);
        assert_eq!(EmailStatus::parse("sent"), None, "one form only");
        let back: CampaignStatus = serde_json::from_str("\"SCHEDULED\"").unwrap();
        assert_eq!(back, CampaignStatus::Scheduled);
    }
}
