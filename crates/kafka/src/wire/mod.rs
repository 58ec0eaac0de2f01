//! kshard's own Kafka client: requests written with the `kafka-protocol`
//! crate's messages, answers read in place. [`broker_link`] is one
//! connection (TCP, TLS through OpenSSL, SASL PLAIN or [`scram`]); the
//! [`fetcher`] shares one per broker among every partition reader of a
//! [`crate::Client`], with Fetch sessions ([`fetch_session`], pure), its
//! decisions made by [`fetch_plan`] (pure, on the caller's clock) and its
//! readers' queues in [`fetch_sink`]; [`fetch_response`]
//! reads a Fetch answer's frame, [`record_batch`] a batch's header and
//! [`records`] walks the batches' records in place (pure);
//! [`inflate`] decompresses a batch as a capped stream;
//! [`read_ahead`] bounds what the fetcher holds for its readers together;
//! [`fetch_times`] reads record timestamps with Fetch requests of its own,
//! [`share_groups`] makes the share-group admin calls and [`admin`] the
//! others the lag monitor makes; they keep their connections in [`links`].
//! The [`writer`] is the producer side: a sender thread per broker writes
//! the batches every [`producer`] (idempotent or transactional) queues in
//! its [`lanes`], in Produce requests built by [`produce`] (pure). Every other answer is decoded by the crate
//! only once [`answer_shape`] has checked its counts and lengths.
//! Every byte of an answer is read with [`kshard_offsets::cursor::Cursor`],
//! checked, so nothing a broker sends can make these panic or exhaust memory.

pub(crate) mod admin;
pub(crate) mod answer_shape;
pub(crate) mod broker_link;
pub(crate) mod cluster_admin;
pub(crate) mod fetch_plan;
pub(crate) mod fetch_response;
pub(crate) mod fetch_session;
pub(crate) mod fetch_sink;
pub(crate) mod fetch_times;
pub(crate) mod fetcher;
pub(crate) mod inflate;
pub(crate) mod lanes;
pub(crate) mod links;
pub(crate) mod out_batch;
pub(crate) mod produce;
pub(crate) mod producer;
pub(crate) mod read_ahead;
pub(crate) mod record_batch;
pub(crate) mod records;
pub(crate) mod scram;
pub(crate) mod share_groups;
pub(crate) mod writer;
