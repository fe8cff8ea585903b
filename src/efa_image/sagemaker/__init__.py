"""SageMaker: instance types and the `distribution` configuration of training jobs."""
