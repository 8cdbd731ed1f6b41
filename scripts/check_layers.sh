#!/bin/sh
# The layers point one way (docs/design): each library folder is compiled
# with include/, its own folder and the surface/ folders of the layers
# below it (meson.build), so a header of another layer is found only
# through that layer's surface. An include that names a path with "../"
# would get around that, since a quoted include is looked up next to the
# including file first; this refuses every one that leaves the folder of
# its own layer. Prints each offending line; exit status 1 if any.
cd "$(dirname "$0")/.." || exit 2
bad=0
for layer in engine tensor ops graph capture onnx dist proto; do
  [ -d "$layer" ] || continue
  for f in $(find "$layer" -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' | sort); do
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*\.\./' "$f" | while IFS= read -r line; do
      path=$(printf '%s\n' "$line" | sed 's/^[^"]*"\([^"]*\)".*/\1/')
      target=$(realpath -m "$(dirname "$f")/$path")
      case "$target" in
        "$PWD/$layer"/*) ;;
        *) echo "$f:$line: leaves $layer/ (include the layer's surface header by name)"; echo bad ;;
      esac
    done
  done
done | { out=$(cat); printf '%s\n' "$out" | grep -v '^bad$' | grep . ; ! printf '%s\n' "$out" | grep -qx bad; }
