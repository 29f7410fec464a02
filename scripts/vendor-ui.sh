#!/usr/bin/env bash
# Vendors the chart library of the management UI into static/vendor/, so that
# the build embeds it and the UI needs no network at run time. Run it after
# changing the pinned version; its output is kept in the source tree.
set -euo pipefail

UPLOT_VERSION=1.6.32

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/static/vendor"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if ! command -v npm >/dev/null; then
  echo "npm is needed to vendor the UI's chart library (apt-get install npm)" >&2
  exit 1
fi

(cd "$work" && npm init -y >/dev/null && npm install --no-audit --no-fund --ignore-scripts "uplot@$UPLOT_VERSION" >/dev/null)

pkg="$work/node_modules/uplot"
mkdir -p "$dest"
# The minified IIFE build: loaded as a plain script, it defines window.uPlot.
cp "$pkg/dist/uPlot.iife.min.js" "$dest/uplot.iife.min.js"
cp "$pkg/dist/uPlot.min.css" "$dest/uplot.min.css"
cp "$pkg/LICENSE" "$dest/uplot.LICENSE"
echo "uplot $UPLOT_VERSION" > "$dest/VERSIONS"
echo "vendored uplot $UPLOT_VERSION into $dest"
