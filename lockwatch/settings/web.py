from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path

# Where lockwatch serves when told nothing; here, not in targets.py, so that the
# command line shows it without loading the settings (lockwatch --help).
DEFAULT_LISTEN = "127.0.0.1:10057"

_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}


_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}


class WebConfigError(Exception):
    """Everything wrong with a web-config file, each as ``file: key: what``."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class WebConfig:
    source: Path
    cert_file: Path | None = None
    key_file: Path | None = None
    client_ca_file: Path | None = None
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"
    users: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # name, bcrypt hash

    @property
    def tls(self) -> bool:
        return self.cert_file is not None

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    def ssl_context(self) -> ssl.SSLContext:
        """The server's TLS context; OSError (with the file named) when a file won't load."""
        assert self.cert_file is not None and self.key_file is not None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = _VERSIONS[self.min_version]
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
            if self.client_ca_file is not None:
                context.load_verify_locations(self.client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise OSError(f"{self.source}: cannot load the TLS certificate or key: {exc}") from None
        context.verify_mode = _CLIENT_AUTH[self.client_auth_type]
        return context
