//! Consumer groups through the Admin API — ListGroups, DescribeGroups and
//! OffsetFetch — for clusters whose `__consumer_offsets` cannot be read
//! (`scrape_mode: admin_api`).
//!
//! The rdkafka crate does not wrap librdkafka's `ListConsumerGroups`,
//! `DescribeConsumerGroups` and `ListConsumerGroupOffsets`, so this module calls
//! them directly, through the client handle of a live [`AdminClient`]. Its only
//! alternative, `rd_kafka_list_groups`, also sends DescribeGroups for every group,
//! which costs a request per group and which some brokers do not answer. Going
//! through librdkafka keeps TLS, SASL and retries the same as every other client.
//! Every pointer below is owned by an RAII guard, and results are copied out
//! before the event that owns them is destroyed.

// FFI calls into librdkafka; each block states why it is sound.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char};
use std::time::{Duration, Instant};

use rdkafka::admin::AdminClient;
use rdkafka_sys as sys;

use crate::error::{Error, Result};
use crate::librdkafka::context::KshardContext;

/// A live admin client: its handle stays valid for the borrow.
type Client = AdminClient<KshardContext>;

/// One group as ListGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// The group id.
    pub group_id: String,
    /// `Stable`, `Empty`, `PreparingRebalance`, … (`Unknown` when not reported).
    pub state: String,
    /// True for groups that only commit offsets (no members, no protocol).
    pub simple: bool,
}

/// A group's committed offsets, as OffsetFetch reports them (the lag
/// application's per-partition state is `kshard_lag::GroupOffsets`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedOffsets {
    /// The group id.
    pub group_id: String,
    /// Topic, partition and committed offset of every partition the group
    /// committed to.
    pub offsets: Vec<(String, i32, i64)>,
    /// The error the broker gave for this group, if any.
    pub error: Option<String>,
}

struct Queue(*mut sys::rd_kafka_queue_t);
impl Drop for Queue {
    fn drop(&mut self) {
        // SAFETY: created by rd_kafka_queue_new and destroyed once, here.
        unsafe { sys::rd_kafka_queue_destroy(self.0) }
    }
}

struct Options(*mut sys::rd_kafka_AdminOptions_t);
impl Drop for Options {
    fn drop(&mut self) {
        // SAFETY: created by rd_kafka_AdminOptions_new and destroyed once, here.
        unsafe { sys::rd_kafka_AdminOptions_destroy(self.0) }
    }
}

struct Event(*mut sys::rd_kafka_event_t);
impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: returned by rd_kafka_queue_poll and destroyed once, here.
        unsafe { sys::rd_kafka_event_destroy(self.0) }
    }
}

/// Copies a C string owned by librdkafka; empty for null.
fn string(ptr: *const c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: librdkafka returns NUL-terminated strings that live as long as the
    // object they belong to, which outlives this call.
    unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned()
}

fn new_queue(client: &Client) -> Queue {
    // SAFETY: the handle belongs to `client`, which is alive for the borrow.
    Queue(unsafe { sys::rd_kafka_queue_new(client.inner().native_ptr()) })
}

fn new_options(client: &Client, op: sys::rd_kafka_admin_op_t, timeout: Duration, step: &str) -> Result<Options> {
    // SAFETY: the handle is live; the options are destroyed by the guard.
    let options = Options(unsafe { sys::rd_kafka_AdminOptions_new(client.inner().native_ptr(), op) });
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    let mut errstr = [0 as c_char; 256];
    // SAFETY: `options` is live; errstr is a writable buffer of the given size.
    let code =
        unsafe { sys::rd_kafka_AdminOptions_set_request_timeout(options.0, ms, errstr.as_mut_ptr(), errstr.len()) };
    if code != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        // SAFETY: librdkafka NUL-terminates what it writes into errstr.
        let message = unsafe { CStr::from_ptr(errstr.as_ptr()) }.to_string_lossy().into_owned();
        return Err(Error::Refused { step: format!("{step}: setting the request timeout"), message });
    }
    Ok(options)
}

/// Waits for the next result event on `queue` until `deadline`.
fn poll(queue: &Queue, deadline: Instant, step: &str) -> Result<Event> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Refused { step: step.to_owned(), message: "timed out".into() });
        }
        let ms = i32::try_from(left.as_millis().min(1000)).unwrap_or(1000);
        // SAFETY: the queue is live for the guard's lifetime.
        let ev = unsafe { sys::rd_kafka_queue_poll(queue.0, ms) };
        if !ev.is_null() {
            return Ok(Event(ev));
        }
    }
}

/// The result of the one request made on `queue`: its event, or its error.
fn single_result(queue: &Queue, timeout: Duration, step: &str) -> Result<Event> {
    let ev = poll(queue, Instant::now() + timeout + Duration::from_secs(1), step)?;
    match event_error(&ev) {
        Some(message) => Err(Error::Refused { step: step.to_owned(), message }),
        None => Ok(ev),
    }
}

/// The event's own error, if it has one.
fn event_error(ev: &Event) -> Option<String> {
    // SAFETY: the event is live for the guard's lifetime.
    let code = unsafe { sys::rd_kafka_event_error(ev.0) };
    if code == sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        return None;
    }
    // SAFETY: as above; the string belongs to the event.
    Some(string(unsafe { sys::rd_kafka_event_error_string(ev.0) }))
}

/// ListGroups on every broker.
pub(crate) fn list_groups(client: &Client, timeout: Duration) -> Result<Vec<GroupListing>> {
    let step = "listing consumer groups";
    let queue = new_queue(client);
    let options = new_options(client, sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPS, timeout, step)?;
    // SAFETY: all handles are live; the result arrives on `queue`.
    unsafe { sys::rd_kafka_ListConsumerGroups(client.inner().native_ptr(), options.0, queue.0) };
    let ev = single_result(&queue, timeout, step)?;
    // SAFETY: the event is a ListConsumerGroups result (the only request on this
    // queue); the result and its listings belong to the event, which outlives
    // the copies made below.
    unsafe {
        let result = sys::rd_kafka_event_ListConsumerGroups_result(ev.0);
        if result.is_null() {
            return Err(Error::Refused { step: step.to_owned(), message: "unexpected event".into() });
        }
        let mut errors = 0usize;
        let errs = sys::rd_kafka_ListConsumerGroups_result_errors(result, &mut errors);
        if errors > 0 && !errs.is_null() {
            // Some broker did not answer: its groups would be missing, and a
            // listing without them is not the cluster's.
            let first = string(sys::rd_kafka_error_string(*errs));
            return Err(Error::Refused { step: step.to_owned(), message: format!("{errors} brokers failed: {first}") });
        }
        let mut count = 0usize;
        let listings = sys::rd_kafka_ListConsumerGroups_result_valid(result, &mut count);
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            let listing = *listings.add(i);
            let state = sys::rd_kafka_ConsumerGroupListing_state(listing);
            out.push(GroupListing {
                group_id: string(sys::rd_kafka_ConsumerGroupListing_group_id(listing)),
                state: string(sys::rd_kafka_consumer_group_state_name(state)),
                simple: sys::rd_kafka_ConsumerGroupListing_is_simple_consumer_group(listing) != 0,
            });
        }
        Ok(out)
    }
}

/// OffsetFetch of every committed offset of each group (one request per group,
/// all in flight at once).
pub(crate) fn group_offsets(client: &Client, groups: &[String], timeout: Duration) -> Result<Vec<FetchedOffsets>> {
    let step = "fetching committed offsets of consumer groups";
    let rk = client.inner().native_ptr();
    let queue = new_queue(client);
    let options =
        new_options(client, sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS, timeout, step)?;
    let mut sent = 0usize;
    let mut out = Vec::with_capacity(groups.len());
    for group in groups {
        let Ok(id) = CString::new(group.as_str()) else {
            out.push(FetchedOffsets {
                group_id: group.clone(),
                offsets: vec![],
                error: Some("group id holds NUL".into()),
            });
            continue;
        };
        // SAFETY: a null partition list asks for every committed offset. The
        // request object is copied by librdkafka and destroyed right after.
        unsafe {
            let mut request = sys::rd_kafka_ListConsumerGroupOffsets_new(id.as_ptr(), std::ptr::null());
            sys::rd_kafka_ListConsumerGroupOffsets(rk, &mut request, 1, options.0, queue.0);
            sys::rd_kafka_ListConsumerGroupOffsets_destroy(request);
        }
        sent += 1;
    }
    let deadline = Instant::now() + timeout + Duration::from_secs(1);
    for _ in 0..sent {
        let ev = poll(&queue, deadline, step)?;
        if let Some(message) = event_error(&ev) {
            tracing::warn!(%message, "{step}");
            continue;
        }
        // SAFETY: each event is a ListConsumerGroupOffsets result; the group
        // results and partition lists belong to the event and are copied out.
        unsafe {
            let result = sys::rd_kafka_event_ListConsumerGroupOffsets_result(ev.0);
            if result.is_null() {
                continue;
            }
            let mut count = 0usize;
            let results = sys::rd_kafka_ListConsumerGroupOffsets_result_groups(result, &mut count);
            for i in 0..count {
                let group = *results.add(i);
                let error = sys::rd_kafka_group_result_error(group);
                let error = (!error.is_null()).then(|| string(sys::rd_kafka_error_string(error)));
                let mut offsets = Vec::new();
                let list = sys::rd_kafka_group_result_partitions(group);
                if !list.is_null() {
                    let n = usize::try_from((*list).cnt).unwrap_or(0);
                    for j in 0..n {
                        let e = &*(*list).elems.add(j);
                        // Partitions without a committed offset come back as -1001.
                        if e.err == sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && e.offset >= 0 {
                            offsets.push((string(e.topic), e.partition, e.offset));
                        }
                    }
                }
                out.push(FetchedOffsets { group_id: string(sys::rd_kafka_group_result_name(group)), offsets, error });
            }
        }
    }
    Ok(out)
}

/// A member of a group, as DescribeGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    /// The member id.
    pub member_id: String,
    /// The static membership id, if any.
    pub group_instance_id: Option<String>,
    /// The client id.
    pub client_id: String,
    /// The client host.
    pub host: String,
    /// The partitions assigned to it: topic and partition.
    pub assignment: Vec<(String, i32)>,
}

/// A group as DescribeGroups (or ConsumerGroupDescribe) reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// The group id.
    pub group_id: String,
    /// `Stable`, `PreparingRebalance`, `CompletingRebalance`, `Empty`, `Dead`, …
    pub state: String,
    /// The assignor (`range`, `uniform`, …), when chosen.
    pub assignor: String,
    /// The members.
    pub members: Vec<MemberDescription>,
    /// The error the broker gave for this group, if any.
    pub error: Option<String>,
}

/// Copies a partition list owned by librdkafka.
///
/// # Safety
/// `list` is null or points to a live partition list.
unsafe fn partitions(list: *const sys::rd_kafka_topic_partition_list_t) -> Vec<(String, i32)> {
    if list.is_null() {
        return Vec::new();
    }
    // SAFETY: the caller guarantees the list is live; `elems` holds `cnt` entries.
    unsafe {
        let n = usize::try_from((*list).cnt).unwrap_or(0);
        (0..n).map(|j| &*(*list).elems.add(j)).map(|e| (string(e.topic), e.partition)).collect()
    }
}

/// DescribeGroups of `groups`, in one request per coordinator.
pub(crate) fn describe_groups(client: &Client, groups: &[String], timeout: Duration) -> Result<Vec<GroupDescription>> {
    let step = "describing consumer groups";
    if groups.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<CString> = groups.iter().filter_map(|g| CString::new(g.as_str()).ok()).collect();
    let mut pointers: Vec<*const c_char> = ids.iter().map(|c| c.as_ptr()).collect();
    let queue = new_queue(client);
    let options =
        new_options(client, sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS, timeout, step)?;
    // SAFETY: the handles are live; librdkafka copies the group ids, which
    // outlive the call anyway; the result arrives on `queue`.
    unsafe {
        sys::rd_kafka_DescribeConsumerGroups(
            client.inner().native_ptr(),
            pointers.as_mut_ptr(),
            pointers.len(),
            options.0,
            queue.0,
        )
    };
    let ev = single_result(&queue, timeout, step)?;
    // SAFETY: the event is a DescribeConsumerGroups result (the only request on
    // this queue); descriptions, members and lists belong to the event, which
    // outlives the copies made here.
    unsafe {
        let result = sys::rd_kafka_event_DescribeConsumerGroups_result(ev.0);
        if result.is_null() {
            return Err(Error::Refused { step: step.to_owned(), message: "unexpected event".into() });
        }
        let mut count = 0usize;
        let descriptions = sys::rd_kafka_DescribeConsumerGroups_result_groups(result, &mut count);
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            let d = *descriptions.add(i);
            let error = sys::rd_kafka_ConsumerGroupDescription_error(d);
            let members = (0..sys::rd_kafka_ConsumerGroupDescription_member_count(d))
                .map(|j| sys::rd_kafka_ConsumerGroupDescription_member(d, j))
                .filter(|m| !m.is_null())
                .map(|m| {
                    let assignment = sys::rd_kafka_MemberDescription_assignment(m);
                    let instance = sys::rd_kafka_MemberDescription_group_instance_id(m);
                    MemberDescription {
                        member_id: string(sys::rd_kafka_MemberDescription_consumer_id(m)),
                        group_instance_id: (!instance.is_null()).then(|| string(instance)),
                        client_id: string(sys::rd_kafka_MemberDescription_client_id(m)),
                        host: string(sys::rd_kafka_MemberDescription_host(m)),
                        assignment: if assignment.is_null() {
                            Vec::new()
                        } else {
                            partitions(sys::rd_kafka_MemberAssignment_partitions(assignment))
                        },
                    }
                })
                .collect();
            out.push(GroupDescription {
                group_id: string(sys::rd_kafka_ConsumerGroupDescription_group_id(d)),
                state: string(sys::rd_kafka_consumer_group_state_name(sys::rd_kafka_ConsumerGroupDescription_state(d))),
                assignor: string(sys::rd_kafka_ConsumerGroupDescription_partition_assignor(d)),
                members,
                error: (!error.is_null()).then(|| string(sys::rd_kafka_error_string(error))),
            });
        }
        Ok(out)
    }
}
