//! Burrow's notifiers, run: every notifier's interval, each group of each
//! cluster it watches is judged from the cluster's last lag snapshot
//! (Burrow's status, as its API gives it), its incidents decide what to
//! send, and the notices go out (at most 8 at a time). A cluster whose lag
//! is not current is skipped, its incidents kept: no notice is sent, nor
//! closed, from stale lag.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::app_state::AppState;
use super::notifier_settings::{Notifier, Sender};
use super::notifier_status::NotifierStatus;
use super::notify_send::{Mail, email, http};
use crate::notify::incidents::{BurrowStatus, Incidents, Notice};
use crate::notify::notice_data::{GroupResult, NoticeData};
use crate::shutdown::Shutdown;

/// Notices sent in flight at once, over every notifier.
const IN_FLIGHT: usize = 8;

/// Runs `notifiers` over `clusters` until `stop`; their counts in the
/// status returned.
pub(crate) fn spawn(
    notifiers: Vec<Notifier>,
    clusters: Vec<AppState>,
    stop: Shutdown,
) -> (Arc<NotifierStatus>, tokio::task::JoinHandle<()>) {
    let status = Arc::new(NotifierStatus::new(notifiers.iter().map(|n| n.settings.name.clone())));
    let task = tokio::spawn(run(notifiers.into_iter().map(Arc::new).collect(), clusters, Arc::clone(&status), stop));
    (status, task)
}

/// Notices of one notifier queued or in flight at once; past it, its other
/// groups wait for the next interval.
const MOST_PENDING: usize = 1000;

/// What a notifier's sending tasks tell its loop.
#[derive(Default)]
struct Pending {
    /// (cluster, group) of each notice queued or in flight.
    groups: std::collections::HashSet<(String, String)>,
    /// Those whose notice failed: sent again at the next look.
    failed: Vec<(String, String)>,
}

async fn run(notifiers: Vec<Arc<Notifier>>, clusters: Vec<AppState>, status: Arc<NotifierStatus>, stop: Shutdown) {
    let mut incidents: Vec<Incidents> = notifiers.iter().map(|_| Incidents::default()).collect();
    let mut due: Vec<Instant> = notifiers.iter().map(|_| Instant::now()).collect();
    let pending: Vec<Arc<std::sync::Mutex<Pending>>> = notifiers.iter().map(|_| Arc::default()).collect();
    let permits = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    loop {
        let next = due.iter().min().copied().unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            _ = tokio::time::sleep_until(next.into()) => {}
            _ = stop.stopped() => return,
        }
        let now = Instant::now();
        for (i, notifier) in notifiers.iter().enumerate() {
            if due[i] > now {
                continue;
            }
            due[i] = now + notifier.settings.interval;
            let busy = {
                let mut p = lock(&pending[i]);
                for (c, g) in std::mem::take(&mut p.failed) {
                    incidents[i].not_sent(&c, &g);
                }
                p.groups.clone()
            };
            for state in clusters.iter().filter(|s| watches(notifier, s)) {
                for (notice, data) in judge(notifier, state, &mut incidents[i], now, &busy) {
                    let key = (data.cluster.clone(), data.group.clone());
                    {
                        let mut p = lock(&pending[i]);
                        if p.groups.len() >= MOST_PENDING {
                            // Sent at a later look: the incident is kept.
                            p.failed.push(key);
                            continue;
                        }
                        p.groups.insert(key.clone());
                    }
                    let (notifier, status, permits) = (Arc::clone(notifier), Arc::clone(&status), Arc::clone(&permits));
                    let pending = Arc::clone(&pending[i]);
                    tokio::spawn(async move {
                        let Ok(_permit) = permits.acquire_owned().await else { return };
                        let sent = deliver(&notifier, &notice, &data).await;
                        let mut p = lock(&pending);
                        p.groups.remove(&key);
                        if let Err(why) = &sent {
                            tracing::warn!(notifier = %notifier.settings.name, group = %data.group, cluster = %data.cluster, close = notice.close, %why, "a notice was not sent");
                            p.failed.push(key);
                        }
                        status.count(i, notice.close, sent.is_ok());
                    });
                }
            }
        }
    }
}

fn lock(p: &std::sync::Mutex<Pending>) -> std::sync::MutexGuard<'_, Pending> {
    p.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn watches(notifier: &Notifier, state: &AppState) -> bool {
    notifier.settings.cluster.as_deref().is_none_or(|c| c == state.cluster_name())
}

/// The notices `notifier` sends about `state`'s groups at `now` (those in
/// `busy` have one on its way, and are not looked at).
fn judge(
    notifier: &Notifier,
    state: &AppState,
    incidents: &mut Incidents,
    now: Instant,
    busy: &std::collections::HashSet<(String, String)>,
) -> Vec<(Notice, NoticeData)> {
    let m = &state.monitor;
    if m.problem().is_some() || !m.is_ready() {
        return Vec::new();
    }
    let cluster = state.cluster_name();
    let snapshot = m.snapshot();
    let groups: Vec<Arc<str>> = snapshot.names().filter(|g| notifier.settings.groups.allows(g)).cloned().collect();
    let mut out = Vec::new();
    let now_ms = m.epoch_ms();
    for group in &groups {
        if busy.contains(&(cluster.to_owned(), group.to_string())) {
            continue;
        }
        let result = crate::burrow::group_status(m, cluster, group, false);
        let burrow = BurrowStatus::from_name(result.status);
        let notice =
            incidents.evaluate(&notifier.rules, cluster, group, burrow, now, || uuid::Uuid::new_v4().to_string());
        if let Some(notice) = notice {
            let started_ms = now_ms - now.saturating_duration_since(notice.started).as_millis() as i64;
            let (from, to) = match &notifier.settings.sender {
                Sender::Email(mail) => (mail.from.clone(), mail.to.join(",")),
                Sender::Http(_) => (String::new(), String::new()),
            };
            let data = NoticeData {
                cluster: cluster.to_owned(),
                group: group.to_string(),
                id: notice.id.clone(),
                id_upper: notice.id.clone(),
                start: NoticeData::start_of(started_ms),
                start_ms: started_ms,
                extras: notifier.settings.extras.clone(),
                result: GroupResult::of(&result),
                from,
                to,
            };
            out.push((notice, data));
        }
    }
    incidents.retain(|c, g| c != cluster || groups.iter().any(|n| &**n == g));
    out
}

/// Renders and sends one notice.
async fn deliver(notifier: &Notifier, notice: &Notice, data: &NoticeData) -> Result<(), String> {
    let value = data.value().map_err(|e| format!("the template's data: {e}"))?;
    let (template, url) = if notice.close {
        (notifier.close.as_ref(), notifier.url_close.as_ref())
    } else {
        (Some(&notifier.open), notifier.url_open.as_ref())
    };
    let template = template.ok_or("no close template")?;
    let text = template.execute_to_string(&value).map_err(|e| format!("rendering the template: {e}"))?;
    match &notifier.settings.sender {
        Sender::Http(target) => {
            let url = url.ok_or("no URL")?.execute_to_string(&value).map_err(|e| format!("rendering the URL: {e}"))?;
            let method = if notice.close { &target.method_close } else { &target.method_open };
            http(target, method, &url, text).await.map_err(|e| e.0)
        }
        Sender::Email(target) => {
            let mail = Mail::parse(&text).map_err(|e| e.0)?;
            email(target, mail).await.map_err(|e| e.0)
        }
    }
}
