#!/bin/sh
# Add this unpacked folder's app to your applications menu (per user; nothing needs root).
# Run it again after moving the folder; `--remove` takes the entry out.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
data="${XDG_DATA_HOME:-$HOME/.local/share}"
if [ "${1:-}" = "--remove" ]; then
  rm -f "$data/applications/launcher.desktop"
  find "$data/icons/hicolor" -path '*/apps/launcher.png' -delete 2>/dev/null || true
  echo "Removed the menu entry."
  exit 0
fi
mkdir -p "$data/applications"
for icon in "$here"/share/icons/hicolor/*/apps/launcher.png; do
  size="$(basename "$(dirname "$(dirname "$icon")")")"
  mkdir -p "$data/icons/hicolor/$size/apps"
  cp "$icon" "$data/icons/hicolor/$size/apps/launcher.png"
done
# Exec gets the absolute path of this copy (quoted, in case the folder's path has spaces).
sed "s|^Exec=launcher\$|Exec=\"$here/launcher\"|" "$here/share/applications/launcher.desktop" \
  >"$data/applications/launcher.desktop"
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database "$data/applications" || true
echo "Added Launcher to the applications menu ($data/applications/launcher.desktop)."
