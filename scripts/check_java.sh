#!/usr/bin/env bash
# Spark 4 needs Java 17 or newer. Say so clearly, and how to get it, before anything else runs.
set -u
java_bin="${JAVA_HOME:+$JAVA_HOME/bin/}java"
if ! command -v "$java_bin" >/dev/null 2>&1; then
  echo "sluice: Java 17+ is required by Spark but no 'java' was found." >&2
  echo "  Debian/Ubuntu: sudo apt-get install -y openjdk-17-jre-headless" >&2
  echo "  macOS:         brew install openjdk@17" >&2
  echo "  or set JAVA_HOME to a JDK 17+ installation." >&2
  exit 1
fi
version=$("$java_bin" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
major=${version%%.*}
[ "$major" = "1" ] && major=$(echo "$version" | cut -d. -f2)
if [ -z "$major" ] || [ "$major" -lt 17 ] 2>/dev/null; then
  echo "sluice: Java $version found, but Spark needs Java 17 or newer." >&2
  echo "  Debian/Ubuntu: sudo apt-get install -y openjdk-17-jre-headless" >&2
  echo "  then point JAVA_HOME at it." >&2
  exit 1
fi
