//! [`Links`]: connections kept to a cluster's brokers by `host:port` — one
//! per broker, made again when the broker closed it or its SASL session is
//! about to end — and the cluster's metadata from whichever answers first.
//! What kshard's own requests outside the fetcher share.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::wire::broker_link::{BrokerLink, LinkSecurity, bootstrap_addresses, broker_address};

/// Metadata v9: the first flexible version; every broker since Kafka 2.4
/// speaks it, Kafka 4 too (which dropped v0 to v3).
const METADATA_VERSION: i16 = 9;

/// Connections to one cluster's brokers.
pub(crate) struct Links {
    /// The bootstrap brokers, `host:port`: where the cluster's metadata is
    /// asked for when no connection is open.
    bootstrap: Vec<String>,
    /// TLS and SASL, as the settings ask.
    security: LinkSecurity,
    /// Open connections, by `host:port`.
    connections: Mutex<HashMap<String, BrokerLink>>,
}

impl Links {
    /// Links to `settings`' brokers: PLAINTEXT, TLS, SASL PLAIN and SCRAM;
    /// `None` for what only librdkafka does (see [`crate::Security`]).
    pub(crate) fn new(client: &Client) -> Result<Option<Self>> {
        let Some(security) = client.link_security()? else { return Ok(None) };
        Ok(Some(Links {
            bootstrap: bootstrap_addresses(client.brokers()),
            security,
            connections: Mutex::new(HashMap::new()),
        }))
    }

    /// `request` on the connection kept to `address`, or on a new one. A
    /// kept connection may have been closed by the broker (idle, or its SASL
    /// session over): one that fails is replaced and the request made once
    /// more. A new connection is kept once it has answered.
    pub(crate) fn on<T>(
        &self,
        address: &str,
        timeout: Duration,
        request: impl Fn(&mut BrokerLink) -> Result<T>,
    ) -> Result<T> {
        let mut connections = self.connections.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(open) = connections.get_mut(address) {
            if !open.expired()
                && let Ok(answer) = request(open)
            {
                return Ok(answer);
            }
            connections.remove(address);
        }
        let mut link = BrokerLink::connect(address, &self.security, timeout)?;
        let answer = request(&mut link)?;
        connections.insert(address.to_owned(), link);
        Ok(answer)
    }

    /// Forgets the connection to `address` (it failed).
    pub(crate) fn drop_link(&self, address: &str) {
        self.connections.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(address);
    }

    /// The cluster's metadata (every topic), from the first broker that
    /// answers: those connected first, then the bootstrap list.
    pub(crate) fn metadata(&self, timeout: Duration) -> Result<MetadataResponse> {
        self.metadata_of(None, timeout)
    }

    /// The cluster's metadata of `topics` (`None`: every topic), as
    /// [`Links::metadata`]; a topic that does not exist is not created.
    pub(crate) fn metadata_of(&self, topics: Option<&[&str]>, timeout: Duration) -> Result<MetadataResponse> {
        let topics = topics.map(|names| {
            names
                .iter()
                .map(|t| {
                    MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_string((*t).to_owned()))))
                })
                .collect()
        });
        let request = MetadataRequest::default().with_topics(topics).with_allow_auto_topic_creation(false);
        self.any(timeout, |link| link.call::<_, MetadataResponse>(&request, METADATA_VERSION, timeout))
    }

    /// `request` on the first broker that answers it: those connected first,
    /// then the bootstrap list; the last error when none does.
    pub(crate) fn any<T>(&self, timeout: Duration, request: impl Fn(&mut BrokerLink) -> Result<T>) -> Result<T> {
        let open: Vec<String> =
            self.connections.lock().unwrap_or_else(std::sync::PoisonError::into_inner).keys().cloned().collect();
        let mut failed = None;
        for address in open.iter().chain(&self.bootstrap) {
            match self.on(address, timeout, &request) {
                Ok(answer) => return Ok(answer),
                Err(e) => failed = Some(e),
            }
        }
        Err(failed.unwrap_or_else(|| Error::Refused {
            step: "asking the cluster's brokers".into(),
            message: "no bootstrap broker".into(),
        }))
    }

    /// Each broker's id and `host:port`, as `metadata` lists them.
    pub(crate) fn brokers(metadata: &MetadataResponse) -> HashMap<i32, String> {
        metadata.brokers.iter().map(|b| (b.node_id.0, broker_address(b.host.as_str(), b.port))).collect()
    }
}
