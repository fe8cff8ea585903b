"""mpi_ssh between two containers of one key pair: root logs in to the other by key,
host key checking stays on and passes through known_hosts' `*` entry, and a key or
host key that is not the image's is refused."""

import shlex

import pytest

# ssh's own exit status when it fails (authentication, host key, connection).
SSH_FAILED = 255


@pytest.fixture
def other(host):
    """The other container's inventory name, which is also its host name and DNS name."""
    variables = host.ansible.get_variables()
    names = set(variables["groups"]["first"] + variables["groups"]["second"])
    assert len(names) == 2
    return (names - {variables["inventory_hostname"]}).pop()


@pytest.fixture
def scratch(host):
    """A directory in the container for keys that are not the image's."""
    path = host.check_output("mktemp -d")
    yield path
    host.run(f"rm -rf {shlex.quote(path)}")


def ssh(host, *args):
    return host.run(shlex.join(["ssh", "-o", "BatchMode=yes", *args]))


def test_root_logs_in_to_the_other_container(host, other):
    result = ssh(host, other, "hostname")
    assert result.rc == 0, result.stderr
    assert result.stdout.strip() == other


def test_both_containers_hold_the_same_key_pair_and_host_key(host, other):
    """What an image gives its containers; here converge.yml copied it over."""
    mine = host.check_output(
        "cat /root/.ssh/id_ed25519.pub /etc/ssh/ssh_host_ed25519_key.pub | ssh-keygen -lf - "
        "| awk '{print $2}'"
    )
    theirs = ssh(
        host,
        other,
        "cat /root/.ssh/id_ed25519.pub /etc/ssh/ssh_host_ed25519_key.pub | ssh-keygen -lf - "
        "| awk '{print $2}'",
    )
    assert theirs.rc == 0, theirs.stderr
    assert len(mine.split()) == 2 and theirs.stdout.split() == mine.split()


@pytest.mark.parametrize("identity", ["image", "other"])
def test_only_the_image_key_is_accepted(host, other, scratch, identity):
    """Without the system client config (it adds the image key to every login),
    only the key given here is offered: the image's logs in, any other is refused
    with publickey as the only method the server allows (no password prompt)."""
    key = "/root/.ssh/id_ed25519"
    if identity == "other":
        key = f"{scratch}/id_ed25519"
        host.check_output(f"ssh-keygen -q -t ed25519 -N '' -C not-the-image -f {key}")
    result = ssh(
        host,
        "-F",
        "/dev/null",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "IdentitiesOnly=yes",
        "-i",
        key,
        other,
        "hostname",
    )
    if identity == "image":
        assert result.rc == 0, result.stderr
        assert result.stdout.strip() == other
    else:
        assert result.rc == SSH_FAILED
        assert "Permission denied (publickey)" in result.stderr
        assert result.stdout == ""


@pytest.mark.parametrize("entry", ["wrong", "missing"])
def test_a_host_key_known_hosts_does_not_trust_is_refused(host, other, scratch, entry):
    """The client config keeps StrictHostKeyChecking on: a known_hosts whose `*`
    entry is another host key, or that has no entry, stops the login before it starts."""
    known_hosts = f"{scratch}/known_hosts"
    if entry == "wrong":
        host.check_output(f"ssh-keygen -q -t ed25519 -N '' -f {scratch}/host_key")
        host.check_output(f"sed 's/^/* /' {scratch}/host_key.pub > {known_hosts}")
    else:
        host.check_output(f": > {known_hosts}")
    result = ssh(host, "-o", f"UserKnownHostsFile={known_hosts}", other, "hostname")
    assert result.rc == SSH_FAILED
    assert "Host key verification failed" in result.stderr
    assert result.stdout == ""
