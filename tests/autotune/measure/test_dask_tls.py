"""The Dask pool over TLS: a scheduler and worker on loopback with certificates signed by a throwaway CA
measure a candidate through DaskRunner("tls://..."), a client without the pool's certificates (none, or
ones signed by another CA) is refused, and a plain tcp:// pool on another machine is refused unless the
user allows it (with a warning saying what an open scheduler port allows)."""
import datetime
import ipaddress
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading

import pytest

distributed = pytest.importorskip("distributed")

import bad_candidates as bc
from distributed.security import Security

from tessera import cli
from tessera.autotune.measure import measure
from tessera.autotune.measure import dask_worker
from tessera.autotune.measure.dask import DaskRunner, check_pool_address, pool_security, resource_name
from tessera.errors import TesseraError

TARGET = "c -num-threads=2"
SETTINGS = dict(number=2, repeat=2, min_repeat_ms=0)


def _pem_files_with_cryptography(folder, name):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def write(path, data):
        path.write_bytes(data)
        return str(path)

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return (write(folder / f"{name}-ca.pem", ca.public_bytes(serialization.Encoding.PEM)),
            write(folder / f"{name}.pem", cert.public_bytes(serialization.Encoding.PEM)),
            write(folder / f"{name}.key", key.private_bytes(serialization.Encoding.PEM,
                                                            serialization.PrivateFormat.PKCS8,
                                                            serialization.NoEncryption())))


def _pem_files_with_openssl(folder, name):
    ca, ca_key = folder / f"{name}-ca.pem", folder / f"{name}-ca.key"
    cert, key, csr = folder / f"{name}.pem", folder / f"{name}.key", folder / f"{name}.csr"
    ext = folder / f"{name}.ext"
    ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for cmd in (["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
                 "-subj", f"/CN={name} test CA", "-keyout", ca_key, "-out", ca],
                ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", f"/CN={name}",
                 "-keyout", key, "-out", csr],
                ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "1",
                 "-extfile", ext, "-out", cert]):
        subprocess.run(["openssl"] + [str(c) for c in cmd], check=True, capture_output=True)
    return str(ca), str(cert), str(key)


def _pem_files(folder, name):
    """(CA certificate, certificate, key) PEM paths: a throwaway CA and one certificate it signed."""
    try:
        import cryptography  # noqa: F401
    except ImportError:
        if shutil.which("openssl") is None:
            pytest.skip("neither the cryptography package nor the openssl command is here to make certificates")
        return _pem_files_with_openssl(folder, name)
    return _pem_files_with_cryptography(folder, name)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("certs")
    return {"pool": _pem_files(folder, "pool"), "stranger": _pem_files(folder, "stranger")}


def _security(paths, role):
    ca, cert, key = paths
    return Security(require_encryption=True, tls_ca_file=ca, **{f"tls_{role}_cert": cert, f"tls_{role}_key": key})


@pytest.fixture(scope="module")
def tls_pool(certs):
    """A TLS scheduler and one in-process worker announcing TARGET, on loopback."""
    ca, cert, key = certs["pool"]
    sec = Security(require_encryption=True, tls_ca_file=ca, tls_scheduler_cert=cert, tls_scheduler_key=key,
                   tls_worker_cert=cert, tls_worker_key=key, tls_client_cert=cert, tls_client_key=key)
    with distributed.LocalCluster(n_workers=1, processes=False, threads_per_worker=1, dashboard_address=None,
                                  protocol="tls://", host="127.0.0.1", security=sec,
                                  resources={resource_name(TARGET): 1}, silence_logs=50) as cluster:
        yield cluster.scheduler_address


def test_candidate_is_measured_through_a_tls_pool(tls_pool, certs):
    assert tls_pool.startswith("tls://127.0.0.1:")
    cands = bc.candidates()
    with DaskRunner(tls_pool, security=certs["pool"], **SETTINGS) as runner:        # the PEM paths
        good, wrong = measure([cands["good"], cands["wrong"]], TARGET, runner=runner)
        (addr,) = runner.workers_for(TARGET)
    assert good.ok and len(good.run_secs) == 2 and good.worker == addr and addr.startswith("tls://")
    assert wrong.error_kind == bc.EXPECTED["wrong"]                   # the worker still checks results
    with DaskRunner(tls_pool, security=_security(certs["pool"], "client"), **SETTINGS) as runner:  # a Security
        (again,) = measure([cands["good"]], TARGET, runner=runner)
    assert again.ok


def _first_byte_back(address, ca, client_cert):
    """The first byte a raw TLS connection to address gets back for some bytes sent; None when the
    server refuses it (a TLS alert, or the connection closed)."""
    host, port = address[len("tls://"):].rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=ca)
    ctx.check_hostname = False                 # Dask's certificates name no host; the CA is what counts
    if client_cert is not None:
        ctx.load_cert_chain(*client_cert)
    try:
        with socket.create_connection((host, int(port)), timeout=5) as raw, ctx.wrap_socket(raw) as tls:
            tls.sendall(b"\0" * 64)
            return tls.recv(1) or None
    except (ssl.SSLError, ConnectionError):
        return None


def test_client_without_the_pools_certificate_is_refused(tls_pool, certs):
    # DaskRunner refuses a tls:// address without certificates before trying
    with pytest.raises(TesseraError, match="reached over TLS, which needs the CA certificate"):
        DaskRunner(tls_pool)
    # a certificate signed by another CA: the scheduler does not accept it (nor the client the scheduler's)
    with pytest.raises(TesseraError, match="cannot reach the Dask scheduler"):
        DaskRunner(tls_pool, security=certs["stranger"], connect_timeout=3)
    # a client that trusts the pool's CA but shows another CA's certificate: the scheduler refuses it
    ca = certs["pool"][0]
    _, cert, key = certs["stranger"]
    with pytest.raises((OSError, TimeoutError)):
        distributed.Client(tls_pool, timeout=3, security=Security(require_encryption=True, tls_ca_file=ca,
                                                                  tls_client_cert=cert, tls_client_key=key))
    # TLS without a client certificate: the scheduler ends the connection before it reads a message,
    # where the same bytes with the pool's certificate get Dask's answer
    assert _first_byte_back(tls_pool, ca, (cert, key)) is None
    assert _first_byte_back(tls_pool, ca, None) is None
    assert _first_byte_back(tls_pool, ca, certs["pool"][1:]) is not None
    # plain TCP to the TLS port
    with pytest.raises((OSError, TimeoutError)):
        distributed.Client(tls_pool.replace("tls://", "tcp://"), timeout=3)


def test_plain_tcp_to_another_machine_is_refused_unless_allowed():
    plain = Security()
    with pytest.raises(TesseraError, match=r"refusing: .* plain tcp:// to another machine: anyone who can reach "
                                           r"that scheduler's port .* run arbitrary code as the workers' user"):
        DaskRunner("tcp://198.51.100.1:8786")               # refused before any connection is tried
    with pytest.raises(TesseraError, match="refusing"):
        DaskRunner("198.51.100.1:8786")                     # Dask's default scheme is tcp
    risk = check_pool_address("tcp://198.51.100.1:8786", plain, allow_insecure=True)
    assert "arbitrary code as the workers' user" in risk and "allow_insecure=True" in risk
    with pytest.warns(RuntimeWarning, match="arbitrary code as the workers' user"), \
            pytest.raises(TesseraError, match="cannot reach the Dask scheduler"):
        DaskRunner("tcp://198.51.100.1:8786", allow_insecure=True, connect_timeout=0.5)
    # this machine's loopback and in-process pools need nothing
    for address in ("tcp://127.0.0.1:8786", "tcp://localhost:8786", "tcp://[::1]:8786", "inproc://10.0.0.1/1/2"):
        assert check_pool_address(address, plain) is None


def test_pool_security_checks_its_files(tmp_path, certs):
    ca, cert, key = certs["pool"]
    sec = pool_security((ca, cert, key))
    assert sec.require_encryption and (sec.tls_ca_file, sec.tls_client_cert, sec.tls_client_key) == (ca, cert, key)
    worker = pool_security((ca, cert), role="worker")
    assert worker.tls_worker_cert == cert and worker.tls_worker_key is None
    with pytest.raises(TesseraError, match="CA certificate .* is not a file"):
        pool_security((str(tmp_path / "missing.pem"), cert, key))
    with pytest.raises(TesseraError, match=r"a distributed.security.Security or the PEM paths \(ca, cert\)"):
        pool_security("ca.pem")


def test_worker_refuses_a_plain_remote_scheduler_and_a_tls_one_without_certificates(capsys):
    assert dask_worker.main(["tcp://198.51.100.1:8786", "--target", TARGET]) == 2
    assert "--insecure" in capsys.readouterr().err
    assert dask_worker.main(["tls://198.51.100.1:8786", "--target", TARGET]) == 2
    assert "--tls-ca-file, --tls-cert, --tls-key" in capsys.readouterr().err
    assert dask_worker.main(["tls://198.51.100.1:8786", "--target", TARGET, "--tls-cert", "w.pem"]) == 2
    assert "--tls-ca-file and --tls-cert go together" in capsys.readouterr().err


def test_tune_cli_refuses_a_plain_remote_pool_before_reading_the_model(tmp_path, capsys):
    db = str(tmp_path / "tune.jsonl")
    assert cli.main(["tune", "no-such-model.onnx", "--trials", "1", "--db", db, "--pool", "tcp://198.51.100.1:8786"]) == 2
    assert "--pool-insecure" in capsys.readouterr().err
    assert cli.main(["tune", "no-such-model.onnx", "--trials", "1", "--db", db, "--pool", "tls://198.51.100.1:8786"]) == 2
    assert "--pool-ca/--pool-cert/--pool-key" in capsys.readouterr().err
    assert cli.main(["tune", "no-such-model.onnx", "--trials", "1", "--db", db, "--pool-ca", "ca.pem"]) == 2
    assert "go with --pool" in capsys.readouterr().err


def test_worker_module_joins_a_tls_pool_with_its_tls_options(certs):
    """dask_worker.main with --tls-ca-file/--tls-cert/--tls-key (in a thread here; the slow test below
    starts it as the documented command) joins a TLS scheduler and measures over tls://."""
    ca, cert, key = certs["pool"]
    sec = Security(require_encryption=True, tls_ca_file=ca, tls_scheduler_cert=cert, tls_scheduler_key=key,
                   tls_client_cert=cert, tls_client_key=key)
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None, protocol="tls://",
                                  host="127.0.0.1", security=sec, silence_logs=50) as cluster:
        argv = [cluster.scheduler_address, "--target", TARGET, "--no-nanny", "--name", "dev",
                "--tls-ca-file", ca, "--tls-cert", cert, "--tls-key", key]
        worker = threading.Thread(target=dask_worker.main, args=(argv,), daemon=True)
        worker.start()
        with DaskRunner(cluster.scheduler_address, security=(ca, cert, key), **SETTINGS) as runner:
            runner.client.wait_for_workers(1, timeout=60)
            (r,) = measure([bc.candidates()["good"]], TARGET, runner=runner)
            runner.client.retire_workers(runner.workers_for(TARGET))
        worker.join(90)      # a retired worker closes its comms and exits: slow on a loaded machine
    assert r.ok and r.worker.startswith("tls://127.0.0.1:") and not worker.is_alive()


@pytest.mark.slow
def test_worker_process_started_with_tls_options_measures(certs, tmp_path):
    """The documented command: a worker process given --tls-ca-file/--tls-cert/--tls-key joins a TLS
    scheduler and measures for a DaskRunner that reaches it over tls://."""
    ca, cert, key = certs["pool"]
    sec = Security(require_encryption=True, tls_ca_file=ca, tls_scheduler_cert=cert, tls_scheduler_key=key,
                   tls_client_cert=cert, tls_client_key=key)
    with distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=None, protocol="tls://",
                                  host="127.0.0.1", security=sec, silence_logs=50) as cluster:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        proc = subprocess.Popen([sys.executable, "-m", "tessera.autotune.measure.dask_worker", cluster.scheduler_address,
                                 "--target", TARGET, "--no-nanny", "--tls-ca-file", ca, "--tls-cert", cert,
                                 "--tls-key", key], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            with DaskRunner(cluster.scheduler_address, security=(ca, cert, key), **SETTINGS) as runner:
                runner.client.wait_for_workers(1, timeout=120)
                (r,) = measure([bc.candidates()["good"]], TARGET, runner=runner)
            assert r.ok and r.worker.startswith("tls://")
        finally:
            proc.kill()
            proc.wait()
