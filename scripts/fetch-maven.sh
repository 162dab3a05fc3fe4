#!/usr/bin/env bash
# Resolve a set of jars from Maven Central into DEST: the one way Icepack fetches from Maven.
#
# Usage: scripts/fetch-maven.sh SET [DEST]
#   SET jars          tools/jars/pom.xml: the jars Icepack passes to Spark (default DEST .cache/jars)
#   SET rest-fixture  tools/rest-fixture/pom.xml: Apache Iceberg's REST catalog test server
#                     (RESTCatalogServer) and its run-time classpath, for the REST catalog tests;
#                     the set must hold the jar with RESTCatalogServer (the iceberg-open-api
#                     test-fixtures jar) (default DEST .cache/rest-fixture)
#
# Idempotent and cheap when nothing changed: DEST/.icepack-SET.stamp records the sha256 of the pom
# and the jar names it produced; if the pom is unchanged and every jar is present, nothing is
# downloaded. `make setup` calls this on every run. Needs only `mvn` and network access to Maven
# Central (or a mirror configured in ~/.m2/settings.xml). Extra Maven flags, such as
# -Dmaven.repo.local=DIR, can be passed in ICEPACK_MAVEN_OPTS.
set -euo pipefail

set_name="${1:-}"
case "$set_name" in
    jars) required_jar="" ;;
    rest-fixture) required_jar="iceberg-open-api-*-test-fixtures.jar" ;;
    *) echo "fetch-maven: unknown set '${set_name}' (expected jars or rest-fixture)" >&2; exit 2 ;;
esac
me="fetch-maven $set_name"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pom="$repo_root/tools/$set_name/pom.xml"
dest="${2:-$repo_root/.cache/$set_name}"
stamp_name=".icepack-$set_name.stamp"

if [[ ! -f "$pom" ]]; then
    echo "$me: $pom is missing" >&2
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
    echo "$me: $dest is up to date ($(sed -n 's/^jar=//p' "$stamp" | tr '\n' ' '))"
    exit 0
fi

if ! command -v mvn >/dev/null 2>&1; then
    echo "$me: mvn (Apache Maven) is not installed; install it (apt-get install maven)" >&2
    exit 1
fi

# Resolve into a scratch directory first so an interrupted run never leaves a half-filled DEST
# that looks complete.
scratch="$(mktemp -d "$dest/.fetch.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
echo "$me: resolving $(grep -c '<dependency>' "$pom") artifacts from Maven Central into $dest"
# Maven 3.8 prints bare colour resets even in batch mode; strip them from its output.
mvn -q -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies \
    -DoutputDirectory="$scratch" -DincludeScope=runtime -DoverWriteReleases=true \
    ${ICEPACK_MAVEN_OPTS:-} 2>&1 | sed -e 's/\x1b\[[0-9;]*m//g'

mapfile -t jars < <(cd "$scratch" && ls -1 -- *.jar 2>/dev/null | sort)
if [[ ${#jars[@]} -eq 0 ]]; then
    echo "$me: maven resolved no jars from $pom" >&2
    exit 1
fi
if [[ -n "$required_jar" ]]; then
    # shellcheck disable=SC2053 # a glob on purpose
    found_required=0
    for jar in "${jars[@]}"; do [[ "$jar" == $required_jar ]] && found_required=1; done
    if [[ $found_required -eq 0 ]]; then
        echo "$me: maven resolved no $required_jar from $pom (got ${jars[*]})" >&2
        exit 1
    fi
fi

# Drop jars of older versions the pom no longer names, then move the new set in.
shopt -s nullglob
for old in "$dest"/*.jar; do
    keep=0
    for jar in "${jars[@]}"; do [[ "$(basename "$old")" == "$jar" ]] && keep=1; done
    if [[ $keep -eq 0 ]]; then
        echo "$me: removing stale $(basename "$old")"
        rm -f -- "$old"
    fi
done
for jar in "${jars[@]}"; do
    mv -f -- "$scratch/$jar" "$dest/$jar"
    echo "$me: $jar"
done

{
    echo "pom-sha256=$pom_sha"
    for jar in "${jars[@]}"; do echo "jar=$jar"; done
} >"$stamp.tmp"
mv -f "$stamp.tmp" "$stamp"
echo "$me: wrote ${#jars[@]} jar(s) and $stamp_name to $dest"
