"""A fake of verify's `run` for the verification tests: canned outcomes by command."""

from efa_image.verification import verify


def fake(responses):
    """A run that answers the first command containing a key of `responses` with its
    (rc, stdout, stderr), and any other with exit 127."""

    def run(command):
        for needle, outcome in responses.items():
            if needle in command:
                return verify.Outcome(*outcome)
        return verify.Outcome(127, "", f"unexpected command {command}")

    return run
