//! The identity in a verified client certificate: its subject common name,
//! which names the user for SASL EXTERNAL (as RabbitMQ's
//! `rabbitmq_auth_mechanism_ssl` does with `ssl_cert_login_from = common_name`).

use rustls_pki_types::CertificateDer;

/// The first subject CN of `cert`, if it parses and has a UTF-8 one.
pub fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let cn = parsed.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_owned)
}
