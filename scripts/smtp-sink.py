#!/usr/bin/python3
# A local SMTP server for tests, on 127.0.0.1 (Debian's python3-aiosmtpd):
# it requires STARTTLS before anything else and AUTH (PLAIN or LOGIN) with
# the one user it is given, and writes each message it accepts to
# OUT/<n>.eml. Prints "PORT=<port>" once it listens.
#   scripts/smtp-sink.py --cert CERT --key KEY --user U --password P --out DIR
# Debian's Python, not another on the PATH: the module is Debian's.
import argparse
import os
import socket
import ssl
import sys
import time
import warnings

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


def main():
    # aiosmtpd warns about its own internals (Session.login_data).
    warnings.simplefilter("ignore", DeprecationWarning)
    p = argparse.ArgumentParser()
    for flag in ("--cert", "--key", "--user", "--password", "--out"):
        p.add_argument(flag, required=True)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(a.cert, a.key)

    class Sink:
        count = 0

        async def handle_DATA(self, server, session, envelope):
            Sink.count += 1
            path = os.path.join(a.out, f"{Sink.count}.eml")
            with open(path + ".part", "wb") as f:
                f.write(b"X-Envelope-From: " + envelope.mail_from.encode() + b"\r\n")
                f.write(b"X-Envelope-To: " + ",".join(envelope.rcpt_tos).encode() + b"\r\n")
                f.write(b"X-Session-TLS: " + (b"yes" if session.ssl else b"no") + b"\r\n")
                f.write(envelope.original_content)
            os.rename(path + ".part", path)
            return "250 OK"

    def authenticator(server, session, envelope, mechanism, auth_data):
        ok = isinstance(auth_data, LoginPassword) and (
            auth_data.login.decode() == a.user and auth_data.password.decode() == a.password)
        return AuthResult(success=ok)

    for _ in range(20):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        controller = Controller(
            Sink(), hostname="127.0.0.1", port=port, tls_context=context, require_starttls=True,
            authenticator=authenticator, auth_required=True, auth_require_tls=True)
        try:
            controller.start()
        except Exception:  # the port was taken meanwhile: another
            continue
        print(f"PORT={port}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            controller.stop()
        return
    sys.exit("no free port for the SMTP server")


if __name__ == "__main__":
    main()
