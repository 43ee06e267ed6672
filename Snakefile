# evocamp: evaluation campaigns for quality diversity, ES and BO.
# Thin entry point; the rules live in workflow/rules/.


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/campaign.smk"
include: "workflow/rules/figures.smk"


rule all:
    default_target: True
    input:
        campaign_targets,
