//! When a notifier tells about a group, as Burrow's notifier coordinator
//! decides it: an incident opens when the group's status leaves OK; while
//! its status is at or above the notifier's threshold, an open notice goes
//! out at most once per repeat interval; when the group is OK again the
//! incident closes, with a close notice if the notifier sends them and told
//! about the incident. Pure: the caller gives each evaluation's status and
//! time.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Burrow's status codes, as its templates compare them (`eq .Result.Status 2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum BurrowStatus {
    NotFound = 0,
    Ok = 1,
    Warn = 2,
    Err = 3,
    Stop = 4,
    Stall = 5,
    Rewind = 6,
}

impl BurrowStatus {
    /// From the name Burrow's API gives it.
    pub(crate) fn from_name(name: &str) -> Self {
        match name {
            "OK" => BurrowStatus::Ok,
            "WARN" => BurrowStatus::Warn,
            "ERR" => BurrowStatus::Err,
            "STOP" => BurrowStatus::Stop,
            "STALL" => BurrowStatus::Stall,
            "REWIND" => BurrowStatus::Rewind,
            _ => BurrowStatus::NotFound,
        }
    }

    /// The name Burrow's API gives it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            BurrowStatus::NotFound => "NOTFOUND",
            BurrowStatus::Ok => "OK",
            BurrowStatus::Warn => "WARN",
            BurrowStatus::Err => "ERR",
            BurrowStatus::Stop => "STOP",
            BurrowStatus::Stall => "STALL",
            BurrowStatus::Rewind => "REWIND",
        }
    }
}

/// How a notifier decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NoticeRules {
    /// Open notices from this status up (Burrow's `threshold`: WARN or ERR).
    pub(crate) threshold: BurrowStatus,
    /// At most one open notice per group per this (Burrow's `send-interval`).
    pub(crate) repeat: Duration,
    /// A close notice when a group told about is OK again (`send-close`).
    pub(crate) send_close: bool,
}

/// A notice to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Notice {
    /// The incident's id (the same in its open and close notices).
    pub(crate) id: String,
    /// When the incident opened.
    pub(crate) started: Instant,
    /// The close notice, or an open one.
    pub(crate) close: bool,
}

#[derive(Debug)]
struct Incident {
    id: String,
    started: Instant,
    last_sent: Option<Instant>,
}

/// The open incidents of one notifier, by (cluster, group).
#[derive(Debug, Default)]
pub(crate) struct Incidents {
    open: HashMap<(String, String), Incident>,
}

impl Incidents {
    /// Takes the group's status at `now`; `new_id` names an incident that
    /// opens. The notice to send, if any.
    pub(crate) fn evaluate(
        &mut self,
        rules: &NoticeRules,
        cluster: &str,
        group: &str,
        status: BurrowStatus,
        now: Instant,
        new_id: impl FnOnce() -> String,
    ) -> Option<Notice> {
        let key = (cluster.to_owned(), group.to_owned());
        if status == BurrowStatus::NotFound {
            // Not known now (deleted, or between two reads): nothing to say,
            // and an incident stays open.
            return None;
        }
        if status == BurrowStatus::Ok {
            let incident = self.open.remove(&key)?;
            // Told about, and the notifier sends close notices.
            let told = rules.send_close && incident.last_sent.is_some();
            return told.then_some(Notice { id: incident.id, started: incident.started, close: true });
        }
        let incident = self.open.entry(key).or_insert_with(|| Incident { id: new_id(), started: now, last_sent: None });
        if status < rules.threshold {
            return None;
        }
        let due = incident.last_sent.is_none_or(|t| now.saturating_duration_since(t) >= rules.repeat);
        if !due {
            return None;
        }
        incident.last_sent = Some(now);
        Some(Notice { id: incident.id.clone(), started: incident.started, close: false })
    }

    /// A notice about the group's incident did not go out: the next
    /// evaluation sends it again (and a close notice needs one that did).
    pub(crate) fn not_sent(&mut self, cluster: &str, group: &str) {
        if let Some(incident) = self.open.get_mut(&(cluster.to_owned(), group.to_owned())) {
            incident.last_sent = None;
        }
    }

    /// Forgets the incidents of groups `keep` says are gone.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&str, &str) -> bool) {
        self.open.retain(|(c, g), _| keep(c, g));
    }

    /// Open incidents.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use BurrowStatus::*;

    const RULES: NoticeRules = NoticeRules { threshold: Warn, repeat: Duration::from_secs(60), send_close: true };

    fn run(rules: &NoticeRules, steps: &[(u64, BurrowStatus)]) -> Vec<(u64, bool, String)> {
        let t0 = Instant::now();
        let mut incidents = Incidents::default();
        let mut n = 0;
        let mut out = Vec::new();
        for (s, status) in steps {
            let now = t0 + Duration::from_secs(*s);
            if let Some(notice) = incidents.evaluate(rules, "c", "g", *status, now, || {
                n += 1;
                format!("id{n}")
            }) {
                assert!(notice.started <= now);
                out.push((*s, notice.close, notice.id));
            }
        }
        out
    }

    #[test]
    fn an_incident_is_told_once_per_repeat_and_closed_once() {
        let steps = [(0, Ok), (10, Warn), (20, Err), (69, Err), (70, Warn), (80, Ok), (90, Ok), (100, Stop)];
        let sent = run(&RULES, &steps);
        let want = [(10, false, "id1"), (70, false, "id1"), (80, true, "id1"), (100, false, "id2")];
        assert_eq!(sent, want.map(|(s, c, i)| (s, c, i.to_owned())));
    }

    #[test]
    fn below_the_threshold_nothing_is_sent_and_no_close_either() {
        let rules = NoticeRules { threshold: Err, ..RULES };
        assert_eq!(run(&rules, &[(0, Warn), (10, Warn), (20, Ok)]), []);
        let sent = run(&rules, &[(0, Warn), (10, Stall), (20, Ok)]);
        assert_eq!(sent, [(10, false, "id1".to_owned()), (20, true, "id1".to_owned())], "one incident from WARN on");
        let quiet = NoticeRules { send_close: false, ..RULES };
        assert_eq!(run(&quiet, &[(0, Err), (10, Ok)]), [(0, false, "id1".to_owned())]);
    }

    #[test]
    fn a_notice_not_sent_goes_again_and_not_found_closes_nothing() {
        let mut incidents = Incidents::default();
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        assert!(incidents.evaluate(&RULES, "c", "g", Err, at(0), || "a".into()).is_some());
        incidents.not_sent("c", "g");
        let again = incidents.evaluate(&RULES, "c", "g", Err, at(1), || "b".into()).expect("sent again");
        assert_eq!(again.id, "a", "the same incident");
        assert_eq!(incidents.evaluate(&RULES, "c", "g", NotFound, at(2), || "c".into()), None);
        assert!(incidents.evaluate(&RULES, "c", "g", Ok, at(3), || "d".into()).expect("closed").close);
    }

    #[test]
    fn a_gone_group_forgets_its_incident() {
        let mut incidents = Incidents::default();
        let now = Instant::now();
        incidents.evaluate(&RULES, "c", "g", Err, now, || "a".into());
        incidents.evaluate(&RULES, "c", "h", Err, now, || "b".into());
        incidents.retain(|_, g| g == "h");
        assert_eq!(incidents.len(), 1);
        assert_eq!(BurrowStatus::from_name("STALL"), Stall);
        assert_eq!(Stall.name(), "STALL");
    }
}
