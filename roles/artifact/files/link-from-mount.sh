# Arguments: pairs of SOURCE DEST. Links each DEST to SOURCE, a file in the
# controller's artifact cache as the target sees it mounted. Prints "linked DEST"
# for each link it makes or changes and "missing DEST" where SOURCE is not on
# the target (no mount, or another cache mounted): those are copied instead.
set -eu
while [ $# -ge 2 ]; do
    if [ ! -f "$1" ]; then
        echo "missing $2"
    elif [ "$(readlink "$2" 2>/dev/null || true)" != "$1" ]; then
        ln -sfn "$1" "$2"
        echo "linked $2"
    fi
    shift 2
done
