//! `kshard example wordcount`'s query endpoint on real processes, the real
//! broker and etcd: `GET /words/{word}` answered from any of three members,
//! each read naming the record it has just written, through a `kill -9` of
//! the count shard's primary. (A binary of its own: libtest runs a binary's
//! tests side by side, and beside the three-broker test of wordcount.rs it
//! would load a two-core machine past what either test is about.)

mod common;

use std::time::{Duration, Instant};

use common::sum_cluster::SumCluster;
use kshard_testkit::Etcd;

const LEASE_TTL: u64 = 3;

/// `GET /words/{word}` from any of three members, each read naming the
/// record it has just written (`?seen=`), through a `kill -9` of the
/// count shard's primary: every answer is the exact count, writes included
/// (read your writes), whichever member was asked and wherever the primary
/// is; a member that cannot answer yet says 503, never an older count. A
/// standby answers when the read accepts its staleness.
#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_count_is_read_from_any_member_with_its_writes_through_kill_9_of_the_primary() {
    let etcd = Etcd::from_env_or_start();
    let mut cluster = SumCluster::new("wordcount-query", Some(etcd.endpoint()), 2, LEASE_TTL);
    cluster.app = "wordcount";
    cluster.produce(300);
    let members = ["a", "b", "c"];
    for m in members {
        cluster.start(m, &[]);
    }
    cluster.until(None, "served", Duration::from_secs(90), |r| SumCluster::served(r, &members, 1));
    // A word no line has (theirs are w0000 …): this test is its only writer.
    let word = "probe";
    let partition = kshard_kafka::offsets_partition_for(word, cluster.partitions);
    let (words, shard) = (format!("{}-words", cluster.topic), format!("count-{partition:03}"));
    let writer = kshard_kafka::RecordWriter::new(&kshard_kafka::Client::to_brokers(&cluster.brokers)).expect("writer");
    let mut alive: Vec<&str> = members.to_vec();
    let (mut forwarded, mut longest) = (0, Duration::ZERO);
    for written in 1..=30_u64 {
        if written == 11 {
            let rows = cluster.shards(None);
            let primary = rows.iter().find(|r| r.shard == shard && r.status == "PRIMARY").expect("a primary");
            let primary = members.into_iter().find(|m| *m == primary.member).expect("one of ours");
            cluster.signal(primary, "KILL");
            cluster.reap(primary);
            alive.retain(|m| *m != primary);
            eprintln!("killed {primary}, the primary of {shard}, with -9");
        }
        let offset = writer.append(&words, partition, word.as_bytes(), None).expect("appends");
        let offset = offset.wait(Duration::from_secs(30)).expect("written");
        let asked = alive[written as usize % alive.len()];
        let path = format!("/words/{word}?seen={words}:{partition}:{offset}&wait=20s");
        let started = Instant::now();
        let (status, headers, body) = loop {
            let answer = get(cluster.listen(asked), &path);
            match answer {
                Ok((503, _, _)) | Err(_) if started.elapsed() < Duration::from_secs(60) => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Ok(answer) => break answer,
                Err(e) => panic!("{asked} did not answer within 60 s: {e}"),
            }
        };
        longest = longest.max(started.elapsed());
        assert_eq!(status, 200, "{asked}: {body}");
        let count: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(count["count"], written, "{asked} counted {word} {written} times, writes included: {body}");
        let answered = header(&headers, "kshard-member").expect("who answered");
        assert!(alive.contains(&answered.as_str()), "answered by {answered}, which is dead");
        assert_eq!(header(&headers, "kshard-replica").as_deref(), Some("primary"));
        forwarded += usize::from(answered != asked);
    }
    eprintln!("30 reads, {forwarded} forwarded to the primary; the longest took {:.1} s", longest.as_secs_f64());
    assert!(forwarded > 0, "some reads were asked of members that are not the primary");

    // A standby answers a read that accepts its staleness.
    // (Until it is caught up with its log, it forwards the read instead.)
    let started = Instant::now();
    let (status, _, body) = loop {
        let rows = cluster.shards(None);
        let standby = rows.iter().find(|r| r.shard == shard && r.status == "STANDBY");
        let answer = standby.map(|s| get(cluster.listen(&s.member), &format!("/words/{word}?stale=30s&wait=20s")));
        if let Some(Ok(answer)) = answer
            && header(&answer.1, "kshard-replica").as_deref() == Some("standby")
        {
            break answer;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no standby answered itself: {rows:#?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(status, 200, "{body}");
    let count: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert!(count["count"].as_u64().is_some_and(|n| n <= 30), "{body}");
    // A read naming a source the shard does not read is refused.
    let (status, _, body) = get(cluster.listen(alive[0]), &format!("/words/{word}?seen=nope:0:1")).expect("answers");
    assert_eq!(status, 400, "{body}");
    // Every count exact, the probe's 30 included.
    let expected = cluster.dir.join("expected.json");
    let mut file: serde_json::Value = serde_json::from_slice(&std::fs::read(&expected).expect("counts")).expect("JSON");
    file["counts"][word] = 30.into();
    std::fs::write(&expected, serde_json::to_vec(&file).expect("JSON")).expect("written");
    cluster.assert_exact();
}

/// A plain HTTP/1.0 GET: the status, the head and the body.
fn get(endpoint: &str, path: &str) -> std::io::Result<(u16, String, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(endpoint)?;
    stream.set_read_timeout(Some(Duration::from_secs(90)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {endpoint}\r\n\r\n")?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((status, head.to_owned(), body.to_owned()))
}

/// The value of header `name` in `head`.
fn header(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
    })
}
