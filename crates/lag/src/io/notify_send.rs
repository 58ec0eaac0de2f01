//! Sending a notice: Burrow's HTTP notifier (one request, its URL and body
//! from templates; TLS through OpenSSL, as the OTLP export) and its email
//! notifier (one mail through an SMTP server with STARTTLS or TLS, lettre's
//! client). Each attempt is bounded by the notifier's timeout; an answer
//! over 64 KiB is not read on.

use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
use tokio::net::TcpStream;

use super::notifier_settings::{HttpTarget, MailTarget, MailTls};

/// Why a notice did not go out (logged with the notifier and the group).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct NotDelivered(pub(crate) String);

impl From<String> for NotDelivered {
    fn from(why: String) -> Self {
        NotDelivered(why)
    }
}

/// The most of an endpoint's answer read (its status is what counts).
const ANSWER_MOST: usize = 64 << 10;

/// Sends `body` to `url` with `method`: `Ok` on a 2xx answer.
pub(crate) async fn http(target: &HttpTarget, method: &str, url: &str, body: String) -> Result<(), NotDelivered> {
    tokio::time::timeout(target.timeout, http_once(target, method, url, body))
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {:?}", target.timeout)))
        .map_err(NotDelivered)
}

async fn http_once(target: &HttpTarget, method: &str, url: &str, body: String) -> Result<(), String> {
    // The URL may carry a secret (a webhook's token): errors do not show it.
    let uri: hyper::Uri = url.trim().parse().map_err(|e| format!("the URL does not parse: {e}"))?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err("the URL is not http:// or https://".into()),
    };
    let host = uri.host().ok_or("the URL names no host")?.trim_matches(['[', ']']).to_owned();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let method = hyper::Method::from_bytes(method.as_bytes()).map_err(|e| format!("method {method:?}: {e}"))?;
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    // Without the URL's user and password, if it has them.
    let authority = match uri.port_u16() {
        Some(p) => format!("{}:{p}", uri.host().unwrap_or_default()),
        None => uri.host().unwrap_or_default().to_owned(),
    };
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::USER_AGENT, concat!("kshard/", env!("CARGO_PKG_VERSION")));
    if !target.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
        request = request.header(hyper::header::CONTENT_TYPE, "application/json");
    }
    for (k, v) in &target.headers {
        request = request.header(k.as_str(), v.as_str());
    }
    if let Some((user, password)) = &target.basic_auth {
        use base64::Engine;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        request = request.header(hyper::header::AUTHORIZATION, format!("Basic {token}"));
    }
    let request = request.body(Full::new(bytes::Bytes::from(body))).map_err(|e| format!("the request: {e}"))?;
    let status = if https {
        let verify = !target.insecure_skip_verify;
        let stream = super::otlp_transport::tls_stream(&connector(target)?, verify, &host, port)
            .await
            .map_err(|e| format!("connecting with TLS to {host}:{port}: {e}"))?;
        exchange(TokioIo::new(stream), request).await?
    } else {
        let tcp =
            TcpStream::connect((host.as_str(), port)).await.map_err(|e| format!("connecting to {host}:{port}: {e}"))?;
        exchange(TokioIo::new(tcp), request).await?
    };
    if (200..300).contains(&status) { Ok(()) } else { Err(format!("the endpoint answered {status}")) }
}

/// The TLS client for `target` (its CA file, or none verified).
fn connector(target: &HttpTarget) -> Result<SslConnector, String> {
    let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(|e| e.to_string())?;
    if let Some(ca) = &target.ca_file {
        builder.set_ca_file(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
    }
    if target.insecure_skip_verify {
        builder.set_verify(SslVerifyMode::NONE);
    }
    Ok(builder.build())
}

async fn exchange<T>(io: TokioIo<T>, request: hyper::Request<Full<bytes::Bytes>>) -> Result<u16, String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.map_err(|e| e.to_string())?;
    let driver = tokio::spawn(connection);
    let answer = sender.send_request(request).await.map_err(|e| e.to_string());
    let status = match answer {
        Ok(response) => {
            let status = response.status().as_u16();
            let _ = http_body_util::Limited::new(response.into_body(), ANSWER_MOST).collect().await;
            Ok(status)
        }
        Err(e) => Err(e),
    };
    driver.abort();
    status
}

/// A rendered email template: its `Subject:` line (first), optional
/// `Content-Type:` and `MIME-version:` lines, and the rest as the body, as
/// Burrow reads it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Mail {
    pub(crate) subject: String,
    pub(crate) content_type: String,
    pub(crate) body: String,
}

impl Mail {
    /// Reads a rendered template.
    pub(crate) fn parse(text: &str) -> Result<Mail, NotDelivered> {
        if !text.starts_with("Subject: ") {
            return Err(NotDelivered("the template's output does not begin with a \"Subject: \" line".into()));
        }
        let (mut subject, mut content_type, mut body) = (None, "text/plain".to_owned(), String::new());
        for line in text.split('\n') {
            if let Some(s) = line.strip_prefix("Subject: ").filter(|_| subject.is_none()) {
                subject = Some(s.trim_end_matches('\r').to_owned());
            } else if let Some(ct) = line.strip_prefix("Content-Type: ") {
                content_type = ct.trim().to_owned();
            } else if line.starts_with("MIME-version: ") {
                // Mail is MIME 1.0 whatever the template says.
            } else {
                body.push_str(line);
                body.push('\n');
            }
        }
        Ok(Mail { subject: subject.unwrap_or_default(), content_type, body })
    }
}

/// Sends `mail` through the target's SMTP server.
pub(crate) async fn email(target: &MailTarget, mail: Mail) -> Result<(), NotDelivered> {
    use lettre::message::header::ContentType;
    use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
    use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

    let mut message = Message::builder()
        .from(target.from.parse().map_err(|e| format!("from {:?}: {e}", target.from))?)
        .subject(mail.subject);
    for to in &target.to {
        message = message.to(to.parse().map_err(|e| format!("to {to:?}: {e}"))?);
    }
    let content_type = ContentType::parse(&mail.content_type)
        .map_err(|e| NotDelivered(format!("the template's Content-Type {:?}: {e}", mail.content_type)))?;
    let message = message.header(content_type).body(mail.body).map_err(|e| format!("the mail: {e}"))?;

    let parameters = || -> Result<TlsParameters, String> {
        let mut p =
            TlsParameters::builder(target.server.clone()).dangerous_accept_invalid_certs(target.insecure_skip_verify);
        if let Some(ca) = &target.ca_file {
            let pem = std::fs::read(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
            p = p.add_root_certificate(Certificate::from_pem(&pem).map_err(|e| format!("{}: {e}", ca.display()))?);
        }
        p.build_rustls().map_err(|e| format!("TLS: {e}"))
    };
    let tls = match target.tls {
        MailTls::StartTls => Tls::Required(parameters()?),
        MailTls::Tls => Tls::Wrapper(parameters()?),
        MailTls::None => Tls::None,
    };
    let mut transport = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&target.server)
        .port(target.port)
        .tls(tls)
        .timeout(Some(target.timeout));
    if let Some((user, password)) = &target.credentials {
        transport = transport
            .credentials(lettre::transport::smtp::authentication::Credentials::new(user.clone(), password.clone()));
    }
    let transport = transport.build();
    tokio::time::timeout(target.timeout * 2, transport.send(message))
        .await
        .map_err(|_| format!("no answer within {:?}", target.timeout * 2))?
        .map(|_| ())
        .map_err(|e| NotDelivered(format!("SMTP with {}:{}: {e}", target.server, target.port)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rendered_mail_is_read_as_burrow_reads_it() {
        let mail = Mail::parse(
            "Subject: lag on billing\nContent-Type: text/html; charset=utf-8\nMIME-version: 1.0\n\n<b>ERR</b>\n",
        )
        .expect("a mail");
        assert_eq!(mail.subject, "lag on billing");
        assert_eq!(mail.content_type, "text/html; charset=utf-8");
        assert!(lettre::message::header::ContentType::parse(&mail.content_type).is_ok(), "lettre reads it");
        assert_eq!(mail.body, "\n<b>ERR</b>\n\n");
        assert!(Mail::parse("no subject\n").is_err());
    }
}
