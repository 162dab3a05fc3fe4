#!/usr/bin/env bash
# Resolve Apache Iceberg's runnable REST catalog test server (tools/rest-fixture/pom.xml) from
# Maven Central into DEST, for the REST catalog tests (tests/plugins/rest_fixture.py).
#
# Usage: scripts/fetch-rest-fixture.sh [DEST]   (default DEST: .cache/rest-fixture under the repo)
#
# Idempotent and cheap when nothing changed: DEST/.icepack-rest-fixture.stamp records the sha256
# of the pom and the jar it produced; if the pom is unchanged and the jar is present, nothing is
# downloaded (the jar is about 200 MB). Needs only `mvn` and network access to Maven Central (or
# a mirror configured in ~/.m2/settings.xml). Extra Maven flags, such as -Dmaven.repo.local=DIR,
# can be passed in ICEPACK_MAVEN_OPTS. Run it with: java -jar DEST/<jar named in the stamp>.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pom="$repo_root/tools/rest-fixture/pom.xml"
dest="${1:-$repo_root/.cache/rest-fixture}"
stamp_name=".icepack-rest-fixture.stamp"
min_bytes=$((10 * 1024 * 1024))  # the runnable jar is ~200 MB; a thin jar cannot run alone

if [[ ! -f "$pom" ]]; then
    echo "fetch-rest-fixture: $pom is missing" >&2
    exit 1
fi

pom_sha="$(sha256sum "$pom" | cut -d' ' -f1)"
mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"
stamp="$dest/$stamp_name"

stamp_is_current() {
    [[ -f "$stamp" ]] || return 1
    [[ "$(sed -n 's/^pom-sha256=//p' "$stamp")" == "$pom_sha" ]] || return 1
    local jar found=0
    while IFS= read -r jar; do
        [[ -s "$dest/$jar" ]] || return 1
        found=1
    done < <(sed -n 's/^jar=//p' "$stamp")
    [[ $found -eq 1 ]]
}

if stamp_is_current; then
    echo "fetch-rest-fixture: $dest is up to date ($(sed -n 's/^jar=//p' "$stamp" | tr '\n' ' '))"
    exit 0
fi

if ! command -v mvn >/dev/null 2>&1; then
    echo "fetch-rest-fixture: mvn (Apache Maven) is not installed; install it (apt-get install maven)" >&2
    exit 1
fi

# Resolve into a scratch directory first so an interrupted run never leaves a half-filled DEST
# that looks complete.
scratch="$(mktemp -d "$dest/.fetch.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
echo "fetch-rest-fixture: resolving the Iceberg REST fixture jar from Maven Central into $dest"
# Maven 3.8 prints bare colour resets even in batch mode; strip them from its output.
mvn -q -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies \
    -DoutputDirectory="$scratch" -DincludeScope=runtime -DoverWriteReleases=true \
    ${ICEPACK_MAVEN_OPTS:-} 2>&1 | sed -e 's/\x1b\[[0-9;]*m//g'

mapfile -t jars < <(cd "$scratch" && ls -1 -- *.jar 2>/dev/null | sort)
if [[ ${#jars[@]} -ne 1 ]]; then
    echo "fetch-rest-fixture: expected one jar from $pom, maven resolved ${#jars[@]}" >&2
    exit 1
fi
jar="${jars[0]}"
size="$(stat -c %s "$scratch/$jar")"
if [[ $size -lt $min_bytes ]]; then
    echo "fetch-rest-fixture: $jar is only $size bytes: not the runnable (shaded) fixture jar" >&2
    exit 1
fi

# Drop jars of older versions the pom no longer names, then move the new one in.
shopt -s nullglob
for old in "$dest"/*.jar; do
    if [[ "$(basename "$old")" != "$jar" ]]; then
        echo "fetch-rest-fixture: removing stale $(basename "$old")"
        rm -f -- "$old"
    fi
done
mv -f -- "$scratch/$jar" "$dest/$jar"

{
    echo "pom-sha256=$pom_sha"
    echo "jar=$jar"
} >"$stamp.tmp"
mv -f "$stamp.tmp" "$stamp"
echo "fetch-rest-fixture: wrote $jar ($((size / 1024 / 1024)) MiB) and $stamp_name to $dest"
