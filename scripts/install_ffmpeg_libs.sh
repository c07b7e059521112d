#!/usr/bin/env bash
# FFmpeg's shared libraries for the torchcodec video backend (PyAV brings its own FFmpeg).
# Debian/Ubuntu, as root; does nothing when they are already there. Never fails the caller:
# without the libraries the torchcodec tests skip, saying why.
#   scripts/install_ffmpeg_libs.sh
# On a fresh Debian 12 machine: ~35 s (apt-get update + 93 packages: FFmpeg 5.1 and its
# codec libraries); the `ffmpeg` package is named alike on every Debian/Ubuntu release and
# pulls that release's libavcodec/libavformat/libavutil/libavdevice/libavfilter/libswscale.
set -uo pipefail
if ldconfig -p 2>/dev/null | grep -q 'libavcodec\.so\.'; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "install_ffmpeg_libs: FFmpeg's shared libraries are missing; install them (Debian: apt-get install ffmpeg) to test the torchcodec backend" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends ffmpeg >/dev/null; }; then
  echo "install_ffmpeg_libs: apt-get could not install ffmpeg; the torchcodec tests will skip" >&2
fi
exit 0
