#!/usr/bin/env bash
# Make sure the system tools Highwater needs are there: a JDK 17+ (Kafka, Spark; javac builds
# the changefeed's JVM walk, pipeline/jvm/walk), Maven
# (fetches the jars once), PostgreSQL's server and MariaDB's (the upstreams of the Debezium
# tests and demos; `highwater dev postgres` runs PostgreSQL as the postgres user, through
# util-linux's setpriv, and MariaDB runs as the mysql user its package creates), and a C
# compiler with Python's headers: the consumer's columnar reader (highwater_consumer/_rdbatch.c,
# built by consumer/setup.py; optional, so without them the library still installs, slower),
# Debian's Chromium with its ChromeDriver and Firefox ESR (the console's tests drive both
# headless; Firefox's WebDriver, geckodriver, is not packaged by Debian: it is built from
# crates.io into .tools/, a pinned version, by cargo).
# Installs them with apt-get when missing and we may; otherwise says what is missing and stops.
set -euo pipefail

need=()
java_major() { java -version 2>&1 | sed -nE 's/.*version "([0-9]+).*/\1/p' | head -n1; }
if ! command -v javac >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ]; then
  need+=(openjdk-17-jdk-headless)
fi
command -v mvn >/dev/null 2>&1 || need+=(maven)
command -v python3 >/dev/null 2>&1 || need+=(python3 python3-venv)
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || need+=(postgresql)
command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
command -v cc >/dev/null 2>&1 || need+=(gcc)
python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null || need+=(python3-dev)
[ -x /usr/sbin/mariadbd ] && command -v mariadb-install-db >/dev/null 2>&1 || need+=(mariadb-server)
{ [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; } || need+=(chromium chromium-driver)
[ -x /usr/bin/firefox-esr ] || need+=(firefox-esr)
command -v cargo >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/cargo" ] || need+=(cargo)

root="$(cd "$(dirname "$0")/.." && pwd)"
geckodriver() {  # Firefox's WebDriver, into .tools/bin (cargo's own cache keeps the sources)
  [ -x "$root/.tools/bin/geckodriver" ] && return 0
  echo "building geckodriver $GECKODRIVER from crates.io into .tools (once)" >&2
  PATH="$PATH:$HOME/.cargo/bin" cargo install --quiet --locked geckodriver \
    --version "$GECKODRIVER" --root "$root/.tools"
}
GECKODRIVER=0.37.1

if [ ${#need[@]} -eq 0 ]; then
  geckodriver
  exit 0
fi

if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
  echo "installing ${need[*]} with apt-get" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  geckodriver
else
  echo "Highwater needs: ${need[*]} (Java 17+, Maven, PostgreSQL, MariaDB, Chromium, Firefox, cargo). Install them and run again." >&2
  exit 1
fi
